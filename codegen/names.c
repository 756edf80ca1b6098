/* names.c — C identifiers for buffers and variables: derived from the IR
 * names, unique within a generated module (i, i_1, i_2 ...) and never equal
 * to a name the generated code itself uses (library functions, builtins). */
#include "cg_internal.h"

#include <stdio.h>
#include <stdlib.h>
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

/* What the C library headers of generated C (math.h, stdlib.h, stdint.h)
 * declare at file scope: functions (math ones also with an f or l suffix)
 * and lowercase macros.  An entry point must not take such a name (`int
 * exit(float *A)` does not compile), and a local name is kept off them too
 * (`errno` and `isnan` are macros).  Sorted for bsearch. */
static const char *const libc_names[] = {
    "abort", "abs", "acos", "acosh", "aligned_alloc", "alloca", "asin", "asinh", "assert", "at_quick_exit",
    "atan", "atan2", "atanh", "atexit", "atof", "atoi", "atol", "atoll", "bsearch", "calloc", "cbrt", "ceil",
    "copysign", "cos", "cosh", "div", "drand48", "drem", "erf", "erfc", "errno", "exit", "exp", "exp10",
    "exp2", "expm1", "fabs", "fdim", "finite", "floor", "fma", "fmax", "fmin", "fmod", "fpclassify", "free",
    "frexp", "gamma", "getenv", "hypot", "ilogb", "iscanonical", "isfinite", "isgreater", "isgreaterequal",
    "isinf", "isless", "islessequal", "islessgreater", "isnan", "isnormal", "issignaling", "issubnormal",
    "isunordered", "iszero", "j0", "j1", "jn", "labs", "ldexp", "ldiv", "lgamma", "llabs", "lldiv", "llrint",
    "llround", "log", "log10", "log1p", "log2", "logb", "lrint", "lround", "malloc", "mblen", "mbstowcs",
    "mbtowc", "memcpy", "memset", "mkdtemp", "mkstemp", "modf", "nan", "nearbyint", "nextafter", "nexttoward",
    "offsetof", "posix_memalign", "pow", "pow10", "putenv", "qsort", "quick_exit", "rand", "rand_r", "random",
    "realloc", "realpath", "remainder", "remquo", "rint", "round", "scalbln", "scalbn", "setenv", "signbit",
    "significand", "sin", "sincos", "sinh", "sqrt", "srand", "srandom", "strtod", "strtof", "strtol",
    "strtold", "strtoll", "strtoul", "strtoull", "system", "tan", "tanh", "tgamma", "trunc", "unsetenv",
    "wcstombs", "wctomb", "y0", "y1", "yn",
};

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool in_libc(const char *s) {
  if (bsearch(&s, libc_names, TN_ARRAY_LEN(libc_names), sizeof libc_names[0], cmp_name)) return true;
  size_t n = strlen(s);
  if (n < 2 || n > 31 || (s[n - 1] != 'f' && s[n - 1] != 'l')) return false;
  char base[32]; /* sinf, sinl: the float and long double variants */
  memcpy(base, s, n - 1);
  base[n - 1] = 0;
  const char *b = base;
  return bsearch(&b, libc_names, TN_ARRAY_LEN(libc_names), sizeof libc_names[0], cmp_name) != NULL;
}

/* Names of the macro convention (no lowercase letter, two characters or
 * more: M_PI, RAND_MAX, HUGE_VAL, FLT_MAX, INT_MAX): a header of C, CUDA or
 * OpenCL may define any of them, and a macro replaces a variable. */
static bool macro_like(const char *s) {
  if (!s[0] || !s[1]) return false;
  for (const char *p = s; *p; p++)
    if (*p >= 'a' && *p <= 'z') return false;
  return true;
}

bool cg_entry_usable(const char *s) {
  return tn_is_identifier(s) && strlen(s) <= CG_ENTRY_MAX && !in_libc(s) && !macro_like(s) && s[0] != '_';
}

static bool name_taken(const cg_ctx_t *c, const char *s) {
  if (tn_is_reserved_word(s) || in_libc(s)) return true;
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
 * digit or underscore or the reserved prefix tuned_ gets "x_"... */
static char *sanitize(cg_ctx_t *c, const char *base) {
  if (!base || !*base) base = "x";
  size_t n = strlen(base);
  char *s = tn_arena_alloc(c->scratch->arena, n + 3);
  size_t k = 0;
  /* and a leading '_' (C reserves _X and __ names) or a macro-like name
   * gets "x_": with a lowercase letter in front, no suffix can make it
   * collide again */
  bool bad_start = !((base[0] >= 'A' && base[0] <= 'Z') || (base[0] >= 'a' && base[0] <= 'z')) ||
                   strncmp(base, "tuned_", 6) == 0 || macro_like(base);
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

const char *cg_entry_for(const char *workload_name) {
  return workload_name && cg_entry_usable(workload_name) ? workload_name : CG_ENTRY_DEFAULT;
}
