/* names.c — C identifiers for buffers and variables: derived from the IR
 * names, unique within a generated module (i, i_1, i_2 ...) and never equal
 * to a name the generated code itself uses (library functions, builtins). */
#include "cg_internal.h"

#include <stdio.h>
#include <string.h>

/* Identifiers the generated code refers to that are not reserved words
 * (tn_is_reserved_word covers keywords, CUDA/OpenCL builtins and tuned_*). */
static const char *const taken[] = {
    "malloc", "free", "expf", "exp", "logf", "log", "sqrtf", "sqrt", "tanhf", "tanh", "fabsf",
    "fabs", "powf", "pow", "fmaxf", "fmax", "fminf", "fmin", "int8_t", "uint8_t", "uint16_t",
    "uint32_t", "int32_t", "int64_t", "NULL", "INFINITY", "NAN", "vload2", "vload4", "vstore2",
    "vstore4", "vload_half", "vstore_half", "CLK_LOCAL_MEM_FENCE", "CLK_GLOBAL_MEM_FENCE", "args",
    "abs", "uchar", "ushort", "unsigned", "memcpy", "signed", "short",
};

static bool name_taken(const cg_ctx_t *c, const char *s) {
  if (tn_is_reserved_word(s)) return true;
  for (int i = 0; i < c->nnames; i++)
    if (strcmp(c->names[i], s) == 0) return true;
  return false;
}

static void name_add(cg_ctx_t *c, const char *s) {
  if (c->nnames == c->capnames) {
    c->capnames = c->capnames ? 2 * c->capnames : 64;
    c->names = tn_xrealloc(c->names, sizeof(*c->names) * (size_t)c->capnames);
  }
  c->names[c->nnames++] = s;
}

void cg_names_init(cg_ctx_t *c) {
  for (size_t i = 0; i < TN_ARRAY_LEN(taken); i++) name_add(c, taken[i]);
}

/* base made into an identifier: invalid characters become '_', a leading
 * digit or reserved prefix gets "x_". */
static char *sanitize(cg_ctx_t *c, const char *base) {
  if (!base || !*base) base = "x";
  size_t n = strlen(base);
  char *s = tn_arena_alloc(c->scratch->arena, n + 3);
  size_t k = 0;
  bool bad_start = !((base[0] >= 'A' && base[0] <= 'Z') || (base[0] >= 'a' && base[0] <= 'z') ||
                     base[0] == '_') ||
                   strncmp(base, "__", 2) == 0 || strncmp(base, "tuned_", 6) == 0;
  if (bad_start) {
    s[k++] = 'x';
    s[k++] = '_';
  }
  for (size_t i = 0; i < n; i++) {
    char ch = base[i];
    bool ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              ch == '_';
    s[k++] = ok ? ch : '_';
  }
  s[k] = 0;
  return s;
}

const char *cg_name_unique(cg_ctx_t *c, const char *base) {
  char *s = sanitize(c, base);
  if (!name_taken(c, s)) {
    name_add(c, s);
    return s;
  }
  for (int k = 1;; k++) {
    char *t = tn_arena_printf(c->scratch->arena, "%s_%d", s, k);
    if (!name_taken(c, t)) {
      name_add(c, t);
      return t;
    }
  }
}

const char *cg_var(const cg_ctx_t *c, const ir_var_t *v) {
  if (v->id >= 0 && v->id < c->nvars && c->var_name[v->id]) return c->var_name[v->id];
  return v->name; /* variables made while lowering carry tuned_* names */
}

const char *cg_comment_name(cg_ctx_t *c, const char *s) {
  char *t = tn_arena_strdup(c->scratch->arena, s ? s : "");
  for (char *p = t; *p; p++)
    if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9')))
      *p = '_';
  return t;
}
