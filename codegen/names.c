/* names.c — C identifiers for buffers and variables: derived from the IR
 * names, unique within a generated module (i, i_1, i_2 ...) and never equal
 * to a name of the reserved table (common/reserved.c: the keywords, types
 * and builtins of C, C++/CUDA and OpenCL C, the C library's names and the
 * generated code's own) nor macro-like. */
#include "cg_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  return tn_is_identifier(s) && strlen(s) <= CG_ENTRY_MAX && tn_reserved_langs(s) == 0 && !macro_like(s) &&
         s[0] != '_';
}

static bool name_taken(const cg_ctx_t *c, const char *s) {
  if (tn_reserved_langs(s) != 0) return true;
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

/* base made into an identifier: invalid characters become '_', a leading
 * digit or underscore, or a reserved prefix gets "x_"... */
static char *sanitize(cg_ctx_t *c, const char *base) {
  if (!base || !*base) base = "x";
  size_t n = strlen(base);
  char *s = tn_arena_alloc(c->scratch->arena, n + 3);
  size_t k = 0;
  /* and a leading '_' (C reserves _X and __ names), a macro-like name or
   * one under a reserved prefix (cudaMalloc, CLK_x, tuned_x: no suffix
   * leaves the prefix) gets "x_": with a lowercase letter in front, no
   * suffix can make it collide again */
  bool bad_start = !((base[0] >= 'A' && base[0] <= 'Z') || (base[0] >= 'a' && base[0] <= 'z')) ||
                   tn_reserved_by_prefix(base) || macro_like(base);
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
