/* tvmscript_syntax.c — TVMScript's syntax for `tunectl import-tvmscript`:
 * a small Python lexer (indentation, brackets, the literals and operators
 * TVMScript uses) and a recursive-descent parser of its statements and
 * expressions into a syntax tree (tvmscript.h), with PATH:LINE:COL errors. */
#include "frontend/tvmscript.h"

/* ======================================================================
 * Tokens
 * ====================================================================== */

/* "PATH:LINE:COL: message", TN_EINVAL. */
__attribute__((format(printf, 4, 5))) int ts_ierr(imp_t *p, int line, int col, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = ir_src_verr(p->err, p->path, line, col, fmt, ap);
  va_end(ap);
  return rc;
}

static token_t *push(imp_t *p, tkind_t k, int line, int col) {
  if (p->ntoks == p->cap) {
    p->cap = p->cap ? 2 * p->cap : 256;
    p->toks = tn_xrealloc(p->toks, sizeof(*p->toks) * (size_t)p->cap);
  }
  token_t *t = &p->toks[p->ntoks++];
  *t = (token_t){.kind = k, .line = line, .col = col};
  return t;
}

static bool idchar(int c, bool first) {
  return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9');
}

/* Longest first, so that "//" wins over "/". */
static const char *const ops[] = {"**", "//", "==", "!=", "<=", ">=", "->", "(", ")", "[", "]", "{", "}", ",",
                                  ":",  ".",  "=",  "+",  "-",  "*",  "/",  "%", "<", ">", "@"};

static int lex_number(imp_t *p, const char *s, size_t *i, int line, int col) {
  const char *start = s + *i;
  char *end;
  size_t n = strspn(start, "0123456789");
  bool is_float = start[n] == '.' || start[n] == 'e' || start[n] == 'E';
  errno = 0;
  token_t *t = push(p, is_float ? T_FLOAT : T_INT, line, col);
  if (is_float) {
    t->fval = strtod(start, &end);
  } else {
    long long v = strtoll(start, &end, 10);
    t->ival = v;
  }
  if (errno || idchar(*end, false)) return ts_ierr(p, line, col, "malformed or out-of-range number");
  *i += (size_t)(end - start);
  return TN_OK;
}

static int lex_string(imp_t *p, const char *s, size_t len, size_t *i, int line, int col) {
  char q = s[*i];
  tn_buf_t b;
  tn_buf_init(&b);
  size_t j = *i + 1;
  for (; j < len && s[j] != q && s[j] != '\n'; j++) {
    if (s[j] == '\\' && j + 1 < len) j++;
    tn_buf_putc(&b, s[j]);
  }
  if (j >= len || s[j] != q) {
    tn_buf_free(&b);
    return ts_ierr(p, line, col, "unterminated string");
  }
  push(p, T_STR, line, col)->text = tn_arena_strdup(p->arena, tn_buf_str(&b));
  tn_buf_free(&b);
  *i = j + 1;
  return TN_OK;
}

/* Indentation at the start of a logical line: INDENT / DEDENTs. */
static int indent(imp_t *p, int *stack, int *n, int width, int line) {
  if (width > stack[*n - 1]) {
    if (*n == MAX_INDENT) return ts_ierr(p, line, 1, "indentation nested too deeply");
    stack[(*n)++] = width;
    push(p, T_INDENT, line, width + 1);
    return TN_OK;
  }
  while (width < stack[*n - 1]) {
    (*n)--;
    push(p, T_DEDENT, line, 1);
  }
  if (width != stack[*n - 1]) return ts_ierr(p, line, width + 1, "indentation does not match any outer level");
  return TN_OK;
}

int ts_lex(imp_t *p, const char *s, size_t len) {
  int stack[MAX_INDENT] = {0}, nstack = 1, nest = 0, line = 1;
  size_t i = 0, bol = 0;
  bool at_bol = true;
  while (i < len) {
    char c = s[i];
    int col = (int)(i - bol) + 1;
    if (at_bol) { /* measure the indentation; blank and comment lines do not count */
      size_t j = i;
      while (j < len && s[j] == ' ') j++;
      if (j < len && s[j] == '\t') return ts_ierr(p, line, (int)(j - bol) + 1, "tabs in indentation are not supported");
      if (j < len && s[j] != '\n' && s[j] != '#' && s[j] != '\r') {
        int rc = indent(p, stack, &nstack, (int)(j - i), line);
        if (rc) return rc;
      }
      i = j;
      at_bol = false;
      continue;
    }
    if (c == '\n') {
      if (nest == 0 && p->ntoks && p->toks[p->ntoks - 1].kind != T_NEWLINE && p->toks[p->ntoks - 1].kind != T_DEDENT &&
          p->toks[p->ntoks - 1].kind != T_INDENT)
        push(p, T_NEWLINE, line, col);
      line++;
      bol = ++i;
      at_bol = nest == 0;
    } else if (c == ' ' || c == '\t' || c == '\r') {
      i++;
    } else if (c == '#') {
      while (i < len && s[i] != '\n') i++;
    } else if (c >= '0' && c <= '9') {
      int rc = lex_number(p, s, &i, line, col);
      if (rc) return rc;
    } else if (idchar(c, true)) {
      size_t j = i;
      while (j < len && idchar(s[j], false)) j++;
      push(p, T_NAME, line, col)->text = tn_arena_strndup(p->arena, s + i, j - i);
      i = j;
    } else if (c == '"' || c == '\'') {
      int rc = lex_string(p, s, len, &i, line, col);
      if (rc) return rc;
    } else {
      size_t k = 0;
      while (k < TN_ARRAY_LEN(ops) && strncmp(s + i, ops[k], strlen(ops[k])) != 0) k++;
      if (k == TN_ARRAY_LEN(ops) || (c == '.' && i + 1 < len && s[i + 1] >= '0' && s[i + 1] <= '9'))
        return ts_ierr(p, line, col, "unexpected character '%c'%s", c, (unsigned char)c >= 0x80 ? " (non-ASCII)" : "");
      if (strchr("([{", c)) nest++;
      if (strchr(")]}", c) && nest > 0) nest--;
      push(p, T_OP, line, col)->text = ops[k];
      i += strlen(ops[k]);
    }
  }
  if (p->ntoks && p->toks[p->ntoks - 1].kind != T_NEWLINE) push(p, T_NEWLINE, line, 1);
  while (nstack-- > 1) push(p, T_DEDENT, line, 1);
  push(p, T_EOF, line, 1);
  return TN_OK;
}

/* ======================================================================
 * Syntax tree
 * ====================================================================== */

token_t *ts_peek(imp_t *p) { return &p->toks[p->pos]; }
static token_t *next_tok(imp_t *p) {
  token_t *t = &p->toks[p->pos];
  if (t->kind != T_EOF) p->pos++;
  return t;
}
static bool is_op(const token_t *t, const char *op) { return t->kind == T_OP && strcmp(t->text, op) == 0; }
static bool is_word(const token_t *t, const char *w) { return t->kind == T_NAME && strcmp(t->text, w) == 0; }
static bool accept_op(imp_t *p, const char *op) {
  if (!is_op(ts_peek(p), op)) return false;
  p->pos++;
  return true;
}

static const char *tok_desc(const token_t *t) {
  switch (t->kind) {
  case T_NAME: case T_OP: return t->text;
  case T_INT: case T_FLOAT: return "a number";
  case T_STR: return "a string";
  case T_NEWLINE: return "the end of the line";
  case T_INDENT: return "an indented block";
  case T_DEDENT: return "the end of a block";
  default: return "the end of the file";
  }
}

static int expect_op(imp_t *p, const char *op) {
  token_t *t = ts_peek(p);
  if (accept_op(p, op)) return TN_OK;
  return ts_ierr(p, t->line, t->col, "expected '%s', found '%s'", op, tok_desc(t));
}

static expr_t *enew(imp_t *p, ekind_t k, const token_t *t) {
  expr_t *e = TN_NEW(p->arena, expr_t);
  e->kind = k;
  e->line = t->line;
  e->col = t->col;
  return e;
}

/* Grows an arena array by one (the arrays are short: copy on append). */
void *ts_append(imp_t *p, void *arr, int n, size_t size, const void *item) {
  char *grown = tn_arena_alloc(p->arena, size * (size_t)(n + 1));
  if (n) memcpy(grown, arr, size * (size_t)n);
  memcpy(grown + size * (size_t)n, item, size);
  return grown;
}
static expr_t *parse_expr(imp_t *p);

/* Items up to `close`: expressions, `name=value` keywords (calls) and
 * `key: value` pairs (dicts). */
static int parse_items(imp_t *p, expr_t *e, const char *close, bool call) {
  while (!is_op(ts_peek(p), close)) {
    token_t *t = ts_peek(p);
    if (call && t->kind == T_NAME && is_op(&p->toks[p->pos + 1], "=")) {
      p->pos += 2;
      expr_t *v = parse_expr(p);
      if (!v) return TN_EINVAL;
      APPEND(p, e->kwnames, e->nkw, t->text);
      e->nkw--;
      APPEND(p, e->kwvals, e->nkw, v);
    } else {
      expr_t *v = parse_expr(p);
      if (!v) return TN_EINVAL;
      if (e->kind == E_INDEX && accept_op(p, ":")) { /* a slice lo:hi, as T.reads prints */
        expr_t *s = enew(p, E_SLICE, t);
        s->a = v;
        if (!(s->b = parse_expr(p))) return TN_EINVAL;
        v = s;
      } else if (e->kind == E_DICT) {
        expr_t *val;
        if (expect_op(p, ":") || !(val = parse_expr(p))) return TN_EINVAL;
        APPEND(p, e->items, e->n, v);
        v = val;
      }
      APPEND(p, e->items, e->n, v);
    }
    if (!accept_op(p, ",")) break;
  }
  return expect_op(p, close);
}

static expr_t *parse_atom(imp_t *p) {
  static const ekind_t leaf[] = {[T_NAME] = E_NAME, [T_INT] = E_INT, [T_FLOAT] = E_FLOAT, [T_STR] = E_STR};
  token_t *t = next_tok(p);
  expr_t *e;
  if (t->kind <= T_STR) { /* a name, number or string: the token's value */
    e = enew(p, leaf[t->kind], t);
    e->text = t->text;
    e->ival = t->ival;
    e->fval = t->fval;
    return e;
  }
  if (is_op(t, "(") || is_op(t, "[") || is_op(t, "{")) {
    e = enew(p, is_op(t, "(") ? E_TUPLE : is_op(t, "[") ? E_LIST : E_DICT, t);
    const char *close = is_op(t, "(") ? ")" : is_op(t, "[") ? "]" : "}";
    if (parse_items(p, e, close, false)) return NULL;
    /* (x) is x; (x,) and () are tuples */
    if (e->kind == E_TUPLE && e->n == 1 && !is_op(&p->toks[p->pos - 2], ",")) return e->items[0];
    return e;
  }
  ts_ierr(p, t->line, t->col, "expected an expression, found '%s'", tok_desc(t));
  return NULL;
}

static expr_t *parse_postfix(imp_t *p) {
  expr_t *e = parse_atom(p);
  while (e) {
    token_t *t = ts_peek(p);
    if (accept_op(p, ".")) {
      token_t *n = next_tok(p);
      if (n->kind != T_NAME) {
        ts_ierr(p, n->line, n->col, "expected a name after '.', found '%s'", tok_desc(n));
        return NULL;
      }
      expr_t *a = enew(p, E_ATTR, t);
      a->line = e->line;
      a->col = e->col;
      a->a = e;
      a->text = n->text;
      e = a;
    } else if (is_op(t, "(") || is_op(t, "[")) {
      p->pos++;
      expr_t *c = enew(p, is_op(t, "(") ? E_CALL : E_INDEX, t);
      c->line = e->line;
      c->col = e->col;
      c->a = e;
      if (parse_items(p, c, is_op(t, "(") ? ")" : "]", c->kind == E_CALL)) return NULL;
      e = c;
    } else {
      break;
    }
  }
  return e;
}

static expr_t *parse_unary(imp_t *p) {
  token_t *t = ts_peek(p);
  if (is_op(t, "-") || is_op(t, "+")) {
    p->pos++;
    if (++p->depth > MAX_DEPTH) {
      ts_ierr(p, t->line, t->col, "expression nested too deeply");
      return NULL;
    }
    expr_t *a = parse_unary(p);
    p->depth--;
    if (!a || is_op(t, "+")) return a;
    if (a->kind == E_INT || a->kind == E_FLOAT) { /* -3 is a literal, as TVM prints it */
      a->ival = -a->ival;
      a->fval = -a->fval;
      a->line = t->line;
      a->col = t->col;
      return a;
    }
    expr_t *e = enew(p, E_NEG, t);
    e->a = a;
    return e;
  }
  expr_t *e = parse_postfix(p);
  if (e && is_op(ts_peek(p), "**")) {
    ts_ierr(p, ts_peek(p)->line, ts_peek(p)->col, "'**' is not supported; write T.pow(x, y)");
    return NULL;
  }
  return e;
}

/* Binary levels, loosest first; `not` sits between `and` and comparisons. */
static const char *const levels[][6] = {
    {"or"}, {"and"}, {"not"}, {"==", "!=", "<", "<=", ">", ">="}, {"+", "-"}, {"*", "/", "//", "%"},
};
enum { NLEVELS = 6, LEVEL_NOT = 2, LEVEL_CMP = 3 };

static const char *level_op(const token_t *t, int level) {
  for (int i = 0; i < 6 && levels[level][i]; i++)
    if ((t->kind == T_OP || t->kind == T_NAME) && strcmp(t->text, levels[level][i]) == 0) return levels[level][i];
  return NULL;
}

static expr_t *parse_level(imp_t *p, int level) {
  if (level == NLEVELS) return parse_unary(p);
  token_t *t = ts_peek(p);
  if (++p->depth > MAX_DEPTH) {
    ts_ierr(p, t->line, t->col, "expression nested too deeply");
    return NULL;
  }
  expr_t *e;
  if (level == LEVEL_NOT && is_word(t, "not")) {
    p->pos++;
    e = enew(p, E_NOT, t);
    if (!(e->a = parse_level(p, level))) e = NULL;
  } else {
    e = parse_level(p, level + 1);
    const char *op;
    while (e && level != LEVEL_NOT && (op = level_op(ts_peek(p), level))) {
      token_t *ot = next_tok(p);
      expr_t *b = enew(p, E_BIN, ot);
      b->text = op;
      b->a = e;
      if (!(b->b = parse_level(p, level + 1))) return NULL;
      if (level == LEVEL_CMP && level_op(ts_peek(p), level)) {
        ts_ierr(p, ts_peek(p)->line, ts_peek(p)->col, "chained comparisons are not supported; join them with 'and'");
        return NULL;
      }
      e = b;
    }
  }
  p->depth--;
  return e;
}

static expr_t *parse_expr(imp_t *p) { return parse_level(p, 0); }

/* ---- statements -------------------------------------------------------- */

static int parse_suite(imp_t *p, stmt_t *s);

static stmt_t *snew(imp_t *p, skind_t k, const token_t *t) {
  stmt_t *s = TN_NEW(p->arena, stmt_t);
  s->kind = k;
  s->line = t->line;
  s->col = t->col;
  return s;
}

static int end_line(imp_t *p) {
  token_t *t = ts_peek(p);
  if (t->kind == T_NEWLINE) {
    p->pos++;
    return TN_OK;
  }
  return ts_ierr(p, t->line, t->col, "expected the end of the line, found '%s'", tok_desc(t));
}

/* Targets of an assignment or a for: one or more expressions joined by ','. */
static int parse_targets(imp_t *p, stmt_t *s, expr_t *first) {
  APPEND(p, s->targets, s->ntargets, first);
  while (accept_op(p, ",")) {
    expr_t *e = parse_postfix(p);
    if (!e) return TN_EINVAL;
    APPEND(p, s->targets, s->ntargets, e);
  }
  return TN_OK;
}

static int parse_def(imp_t *p, stmt_t *s) {
  token_t *n = next_tok(p);
  if (n->kind != T_NAME) return ts_ierr(p, n->line, n->col, "expected the function's name");
  s->name = n->text;
  if (expect_op(p, "(")) return TN_EINVAL;
  while (!is_op(ts_peek(p), ")")) {
    token_t *pn = next_tok(p);
    if (pn->kind != T_NAME) return ts_ierr(p, pn->line, pn->col, "expected a parameter name, found '%s'", tok_desc(pn));
    expr_t *ann = NULL;
    if (accept_op(p, ":") && !(ann = parse_expr(p))) return TN_EINVAL;
    if (!ann) return ts_ierr(p, pn->line, pn->col, "parameter '%s' has no annotation (T.Buffer(...) or T.handle)", pn->text);
    APPEND(p, s->params, s->nparams, pn->text);
    s->nparams--;
    APPEND(p, s->annots, s->nparams, ann);
    if (!accept_op(p, ",")) break;
  }
  if (expect_op(p, ")")) return TN_EINVAL;
  if (accept_op(p, "->") && !parse_expr(p)) return TN_EINVAL;
  return expect_op(p, ":") ? TN_EINVAL : parse_suite(p, s);
}

stmt_t *ts_parse_stmt(imp_t *p) {
  token_t *t = ts_peek(p);
  stmt_t *s;
  if (++p->depth > MAX_DEPTH) {
    ts_ierr(p, t->line, t->col, "statements nested too deeply");
    return NULL;
  }
  if (t->kind == T_INDENT) {
    ts_ierr(p, t->line, t->col, "unexpected indentation");
    return NULL;
  }
  if (is_word(t, "import") || is_word(t, "from") || is_word(t, "pass")) { /* imports: the names are T, I */
    s = snew(p, S_SKIP, t);
    while (ts_peek(p)->kind != T_NEWLINE && ts_peek(p)->kind != T_EOF) p->pos++;
    if (end_line(p)) return NULL;
  } else if (is_op(t, "@")) {
    expr_t **decos = NULL;
    int ndecos = 0;
    while (accept_op(p, "@")) {
      expr_t *d = parse_expr(p);
      if (!d || end_line(p)) return NULL;
      APPEND(p, decos, ndecos, d);
    }
    if (!(s = ts_parse_stmt(p))) return NULL;
    if (s->kind != S_DEF && s->kind != S_CLASS) {
      ts_ierr(p, s->line, s->col, "a decorator must stand before a def or a class");
      return NULL;
    }
    s->decos = decos;
    s->ndecos = ndecos;
  } else if (is_word(t, "def")) {
    p->pos++;
    s = snew(p, S_DEF, t);
    if (parse_def(p, s)) return NULL;
  } else if (is_word(t, "class")) {
    p->pos++;
    s = snew(p, S_CLASS, t);
    token_t *n = next_tok(p);
    if (n->kind != T_NAME) {
      ts_ierr(p, n->line, n->col, "expected the class's name");
      return NULL;
    }
    s->name = n->text;
    if (expect_op(p, ":") || parse_suite(p, s)) return NULL;
  } else if (is_word(t, "for")) {
    p->pos++;
    s = snew(p, S_FOR, t);
    expr_t *first = parse_postfix(p);
    if (!first || parse_targets(p, s, first)) return NULL;
    if (!is_word(ts_peek(p), "in")) {
      ts_ierr(p, ts_peek(p)->line, ts_peek(p)->col, "expected 'in', found '%s'", tok_desc(ts_peek(p)));
      return NULL;
    }
    p->pos++;
    if (!(s->value = parse_expr(p)) || expect_op(p, ":") || parse_suite(p, s)) return NULL;
  } else if (is_word(t, "with")) {
    p->pos++;
    s = snew(p, S_WITH, t);
    if (!(s->value = parse_expr(p))) return NULL;
    if (is_word(ts_peek(p), "as")) {
      ts_ierr(p, ts_peek(p)->line, ts_peek(p)->col, "'with ... as' is not supported");
      return NULL;
    }
    if (expect_op(p, ":") || parse_suite(p, s)) return NULL;
  } else if (t->kind == T_NAME && (is_word(t, "while") || is_word(t, "if") || is_word(t, "return") ||
                                   is_word(t, "lambda") || is_word(t, "assert"))) {
    ts_ierr(p, t->line, t->col, "'%s' is not supported in the imported subset of TVMScript", t->text);
    return NULL;
  } else {
    expr_t *e = parse_expr(p);
    if (!e) return NULL;
    s = snew(p, S_EXPR, t);
    if (is_op(ts_peek(p), ",") || is_op(ts_peek(p), "=")) {
      s->kind = S_ASSIGN;
      if (parse_targets(p, s, e) || expect_op(p, "=") || !(s->value = parse_expr(p))) return NULL;
    } else {
      s->value = e;
    }
    if (end_line(p)) return NULL;
  }
  p->depth--;
  return s;
}

/* NEWLINE INDENT stmt... DEDENT after a ':' (or one statement on the line). */
static int parse_suite(imp_t *p, stmt_t *s) {
  if (ts_peek(p)->kind != T_NEWLINE) {
    stmt_t *one = ts_parse_stmt(p);
    if (!one) return TN_EINVAL;
    APPEND(p, s->body, s->nbody, one);
    return TN_OK;
  }
  p->pos++;
  token_t *t = ts_peek(p);
  if (t->kind != T_INDENT) return ts_ierr(p, t->line, t->col, "expected an indented block");
  p->pos++;
  while (ts_peek(p)->kind != T_DEDENT && ts_peek(p)->kind != T_EOF) {
    stmt_t *c = ts_parse_stmt(p);
    if (!c) return TN_EINVAL;
    APPEND(p, s->body, s->nbody, c);
  }
  if (ts_peek(p)->kind == T_DEDENT) p->pos++;
  return TN_OK;
}
