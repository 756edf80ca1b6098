/* lex.c — the workload language's tokens (docs/workload-language.md):
 * errors at PATH:LINE:COL, small helpers, the symbols (parameters and
 * tensors, with their checks) and the lexer. */
#include "frontend/front.h"

/* clang-format off */
const char *const fe_tok_names[] = {
    [T_EOF] = "end of file", [T_NL] = "end of line", [T_IDENT] = "a name",
    [T_INT] = "an integer", [T_FLOAT] = "a number", [T_LPAREN] = "'('", [T_RPAREN] = "')'",
    [T_LBRACK] = "'['", [T_RBRACK] = "']'", [T_COMMA] = "','", [T_COLON] = "':'",
    [T_ASSIGN] = "'='", [T_PLUS] = "'+'", [T_MINUS] = "'-'", [T_STAR] = "'*'",
    [T_SLASH] = "'/'", [T_DSLASH] = "'//'", [T_PERCENT] = "'%'", [T_EQ] = "'=='",
    [T_NE] = "'!='", [T_LT] = "'<'", [T_LE] = "'<='", [T_GT] = "'>'", [T_GE] = "'>='",
    [T_AND] = "'&&'", [T_OR] = "'||'", [T_NOT] = "'!'",
};
/* clang-format on */

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
__attribute__((format(printf, 4, 5))) int fe_perr(parser_t *p, int line, int col, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = ir_src_verr(p->err, p->path, line, col, fmt, ap);
  va_end(ap);
  return rc;
}

bool fe_is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool fe_is_digit(int c) { return c >= '0' && c <= '9'; }
bool fe_is_alnum(int c) { return fe_is_alpha(c) || fe_is_digit(c); }

const char *fe_plural(int64_t n, const char *one, const char *many) { return n == 1 ? one : many; }

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
bool fe_lang_dtype(const char *s, ir_dtype_t *out) {
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
const char *fe_snippet(const parser_t *p, uint32_t off, uint32_t end, char *buf, size_t cap) {
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

/* "'text'", "end of line" or "end of file", for "found ..." messages. */
const char *fe_tok_desc(const parser_t *p, const tok_t *t, char *buf, size_t cap) {
  if (t->kind == T_EOF || t->kind == T_NL) return fe_tok_names[t->kind];
  char s[64];
  snprintf(buf, cap, "'%s'", fe_snippet(p, t->off, t->off + t->len, s, sizeof s));
  return buf;
}

char *fe_tok_dup(const parser_t *p, tn_arena_t *a, const tok_t *t) {
  return tn_arena_strndup(a, p->src + t->off, t->len);
}

bool fe_tok_is(const parser_t *p, const tok_t *t, const char *word) {
  return t->kind == T_IDENT && t->len == strlen(word) && memcmp(p->src + t->off, word, t->len) == 0;
}

void fe_fmt_bound(int64_t v, char *buf, size_t cap) {
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

ir_param_t *fe_find_param(parser_t *p, const char *name) {
  for (int i = 0; i < p->nparams; i++)
    if (strcmp(p->params[i].name, name) == 0) return &p->params[i];
  return NULL;
}

tensor_t *fe_find_tensor(parser_t *p, const char *name) {
  for (int i = 0; i < p->ntensors; i++)
    if (strcmp(p->tensors[i].name, name) == 0) return &p->tensors[i];
  return NULL;
}

/* "A, B, C" or `none`. */
static void list_tensors(parser_t *p, tn_buf_t *b, const char *none) {
  for (int i = 0; i < p->ntensors; i++) tn_buf_printf(b, "%s%s", i ? ", " : "", p->tensors[i].name);
  if (!p->ntensors) tn_buf_put(b, none);
}

void fe_list_params(parser_t *p, tn_buf_t *b, const char *none) {
  for (int i = 0; i < p->nparams; i++) tn_buf_printf(b, "%s%s", i ? ", " : "", p->params[i].name);
  if (!p->nparams) tn_buf_put(b, none);
}

int fe_unknown_tensor(parser_t *p, int line, int col, const char *name) {
  tn_buf_t b;
  tn_buf_init(&b);
  list_tensors(p, &b, "none yet");
  fe_perr(p, line, col, "unknown tensor '%s' (declared: %s)", name, tn_buf_str(&b));
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

int fe_check_name(parser_t *p, const char *name, int line, int col, const char *what) {
  const char *an = strchr("aeiou", what[0]) ? "an" : "a";
  if (is_keyword(name))
    return fe_perr(p, line, col, "'%s' is a keyword of the workload language and cannot name %s %s", name, an,
                what);
  if (strncmp(name, "__", 2) == 0 || strncmp(name, "tuned_", 6) == 0 || strncmp(name, "v_", 2) == 0)
    return fe_perr(p, line, col,
                "'%s' cannot name %s %s: names starting with '__', 'tuned_' or 'v_' are reserved "
                "for generated code; choose another name",
                name, an, what);
  if (!tn_is_identifier(name)) {
    char langs[96];
    tn_reserved_langs_text(tn_reserved_langs(name) >> TN_RW_WORDS, langs, sizeof langs);
    return fe_perr(p, line, col, "'%s' is a reserved word of %s and cannot name %s %s; choose another name", name,
                langs, an, what);
  }
  return TN_OK;
}

/* Checks a new parameter or tensor name: valid and not declared before. */
int fe_check_new_name(parser_t *p, const char *name, const tok_t *t, const char *what) {
  int rc = fe_check_name(p, name, t->line, t->col, what);
  if (rc) return rc;
  const ir_param_t *pm = fe_find_param(p, name);
  if (pm)
    return fe_perr(p, t->line, t->col, "'%s' is already declared as a parameter at %d:%d; names must be unique",
                name, pm->line, pm->col);
  const tensor_t *tt = fe_find_tensor(p, name);
  if (tt && tt->hoisted)
    return fe_perr(p, t->line, t->col, "'%s' is the temp of the reduction at %d:%d (a reduction inside an expression "
                "is computed into a temp of that name); choose another name", name, tt->line, tt->col);
  if (tt)
    return fe_perr(p, t->line, t->col, "'%s' is already declared as a tensor at %d:%d; names must be unique",
                name, tt->line, tt->col);
  return TN_OK;
}

/* ======================================================================
 * Lexer
 * ====================================================================== */

/* Rejects what the language never contains (NUL, control characters other
 * than tab, CR and LF, non-ASCII bytes, oversized input) before lexing. */
int fe_check_bytes(parser_t *p) {
  int line = 1, col = 1;
  for (size_t i = 0; i < p->len; i++) {
    unsigned char c = (unsigned char)p->src[i];
    if (i >= IR_MAX_SOURCE_BYTES) {
      fe_perr(p, line, col, "the workload is larger than the limit of %u bytes", IR_MAX_SOURCE_BYTES);
      if (p->err) p->err->code = TN_ENOMEM;
      return TN_ENOMEM;
    }
    if (c == 0) return fe_perr(p, line, col, "NUL byte in the workload; expected ASCII text");
    if (c >= 0x80) return fe_perr(p, line, col, "non-ASCII byte 0x%02x; workload files are ASCII text", c);
    if ((c < 0x20 && c != '\n' && c != '\t' && c != '\r') || c == 0x7f)
      return fe_perr(p, line, col, "control character 0x%02x; expected ASCII text", c);
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
  while (j < n && fe_is_digit(s[j])) j++;
  if (j < n && s[j] == '.') {
    is_float = true;
    for (j++; j < n && fe_is_digit(s[j]); j++) {
    }
  }
  if (j < n && (s[j] == 'e' || s[j] == 'E')) {
    size_t k = j + 1;
    if (k < n && (s[k] == '+' || s[k] == '-')) k++;
    if (k < n && fe_is_digit(s[k])) {
      is_float = true;
      for (j = k; j < n && fe_is_digit(s[j]); j++) {
      }
    }
  }
  if (j < n && (fe_is_alnum(s[j]) || s[j] == '.')) {
    size_t k = j;
    while (k < n && (fe_is_alnum(s[k]) || s[k] == '.')) k++;
    return fe_perr(p, line, col,
                "malformed number '%.*s'; expected an integer (1024) or a decimal (0.5, 1e-3, 2.)",
                (int)TN_MIN(k - i, 40), s + i),
           -1;
  }
  tok_t *t = push_tok(p, is_float ? T_FLOAT : T_INT, line, col, i, j - i);
  if (!is_float) {
    for (size_t k = i; k < j; k++) {
      int d = s[k] - '0';
      if (t->ival > (MAX_LITERAL - d) / 10)
        return fe_perr(p, line, col, "integer literal '%.*s' does not fit in 62 bits (the largest is %lld)",
                    (int)TN_MIN(j - i, 40), s + i, (long long)MAX_LITERAL),
               -1;
      t->ival = t->ival * 10 + d;
    }
    return (int64_t)(j - i);
  }
  char buf[401];
  if (j - i >= sizeof buf)
    return fe_perr(p, line, col, "number '%.40s...' is too long (more than %zu characters)", s + i,
                sizeof buf - 1),
           -1;
  memcpy(buf, s + i, j - i);
  buf[j - i] = 0;
  t->fval = strtod(buf, NULL);
  if (!isfinite(t->fval))
    return fe_perr(p, line, col, "number '%.40s' is out of range (the largest is about 1.8e308)", buf), -1;
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
    return fe_perr(p, line, col, "unexpected character '%c' (did you mean '%c%c'?)", c, c, c), -1;
  return fe_perr(p, line, col, "unexpected character '%c'; expected a name, a number or an operator", c), -1;
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

int fe_lex(parser_t *p) {
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
    if (fe_is_alpha(c)) {
      for (n = 1; i + (size_t)n < p->len && fe_is_alnum(p->src[i + (size_t)n]); n++) {
      }
      push_tok(p, T_IDENT, line, col, i, (size_t)n);
    } else if (fe_is_digit(c)) {
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
    return fe_perr(p, o->line, o->col, "'%c' is never closed (expected '%c' before the end of the file)", c,
                c == '(' ? ')' : ']');
  }
  free(open);
  if (p->ntoks > 0 && p->toks[p->ntoks - 1].kind != T_NL) push_tok(p, T_NL, line, col, i, 0);
  push_tok(p, T_EOF, line, col, i, 0);
  return TN_OK;
}
