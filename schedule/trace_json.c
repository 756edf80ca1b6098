/* trace_json.c — traces as JSON (metaschedule.md §2.4): the writer names RVs
 * b/l/v plus a running counter; the parser checks shape, names and decisions
 * and says which instruction and argument is wrong and what would be valid. */
#include <cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sch_internal.h"

#define TRACE_MAX_BYTES (1u << 20)
#define TRACE_MAX_INSTS 100000
#define TRACE_MAX_NESTING 16 /* lists inside lists inside one argument */

static const char rv_prefix[] = {[SCH_RV_BLOCK] = 'b', [SCH_RV_LOOP] = 'l', [SCH_RV_EXPR] = 'v'};

/* ======================================================================
 * Writing
 * ====================================================================== */

/* RV names while writing: per trace RV id, its counter + 1 (0: not defined
 * yet) and kind.  Ids of a trace are dense in practice; ids past the largest
 * defined one can only be dangling. */
typedef struct namer {
  int *num;
  sch_rv_kind_t *kind;
  int cap, next;
} namer_t;

static void namer_init(namer_t *nm, const sch_trace_t *t) {
  int64_t max = -1, limit = (int64_t)SCH_MAX_RVS_OUT * t->n;
  for (int i = 0; i < t->n; i++)
    for (int j = 0; j < t->insts[i].noutputs; j++)
      if (t->insts[i].outputs[j] > max && t->insts[i].outputs[j] < limit) max = t->insts[i].outputs[j];
  nm->cap = (int)max + 1;
  nm->num = tn_xcalloc((size_t)nm->cap + 1, sizeof *nm->num);
  nm->kind = tn_xcalloc((size_t)nm->cap + 1, sizeof *nm->kind);
  nm->next = 0;
}

static void namer_free(namer_t *nm) {
  free(nm->num);
  free(nm->kind);
}

static void put_json_string(tn_buf_t *b, const char *s, bool extra_quotes) {
  tn_buf_putc(b, '"');
  if (extra_quotes) tn_buf_put(b, "\\\"");
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    switch (*p) {
    case '"': tn_buf_put(b, "\\\""); break;
    case '\\': tn_buf_put(b, "\\\\"); break;
    case '\n': tn_buf_put(b, "\\n"); break;
    case '\r': tn_buf_put(b, "\\r"); break;
    case '\t': tn_buf_put(b, "\\t"); break;
    default:
      if (*p < 0x20) tn_buf_printf(b, "\\u%04x", *p);
      else tn_buf_putc(b, (char)*p);
    }
  }
  if (extra_quotes) tn_buf_put(b, "\\\"");
  tn_buf_putc(b, '"');
}

/* Shortest text that reads back to the same double, always marked as a
 * float ("1.0", not "1").  JSON has no infinities: 1e999 reads back as one. */
static void put_float(tn_buf_t *b, double v) {
  if (isnan(v)) {
    tn_buf_put(b, "null");
    return;
  }
  if (isinf(v)) {
    tn_buf_put(b, v < 0 ? "-1e999" : "1e999");
    return;
  }
  char s[40];
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(s, sizeof s, "%.*g", prec, v);
    if (strtod(s, NULL) == v) break;
  }
  tn_buf_put(b, s);
  if (!strpbrk(s, ".eE")) tn_buf_put(b, ".0");
}

static void put_rv(tn_buf_t *b, const namer_t *nm, sch_rv_t rv) {
  if (rv >= 0 && rv < nm->cap && nm->num[rv])
    tn_buf_printf(b, "\"%c%d\"", rv_prefix[nm->kind[rv]], nm->num[rv] - 1);
  else /* the parser reports it as an unknown handle */
    tn_buf_printf(b, "\"dangling_rv%d\"", rv);
}

/* Inputs: RVs by name, "None", strings in extra quotes.  Attrs: plain. */
static void put_args(tn_buf_t *b, const namer_t *nm, const sch_arg_t *args, int n, bool input) {
  tn_buf_putc(b, '[');
  for (int i = 0; i < n; i++) {
    const sch_arg_t *a = &args[i];
    if (i) tn_buf_put(b, ", ");
    switch (a->kind) {
    case SCH_ARG_NONE: tn_buf_put(b, "\"None\""); break;
    case SCH_ARG_INT: tn_buf_printf(b, "%" PRId64, a->i); break;
    case SCH_ARG_FLOAT: put_float(b, a->f); break;
    case SCH_ARG_STR: put_json_string(b, a->s, input); break;
    case SCH_ARG_RV: put_rv(b, nm, a->rv); break;
    case SCH_ARG_LIST: put_args(b, nm, a->items, a->n, input); break;
    }
  }
  tn_buf_putc(b, ']');
}

static void put_outputs(tn_buf_t *b, namer_t *nm, const sch_inst_t *in) {
  sch_rv_kind_t kind = sch_inst_output_kind(in->kind);
  tn_buf_putc(b, '[');
  for (int i = 0; i < in->noutputs; i++) {
    sch_rv_t rv = in->outputs[i];
    int num = nm->next++;
    if (rv >= 0 && rv < nm->cap) nm->num[rv] = num + 1, nm->kind[rv] = kind;
    tn_buf_printf(b, "%s\"%c%d\"", i ? ", " : "", rv_prefix[kind], num);
  }
  tn_buf_putc(b, ']');
}

static void put_decision(tn_buf_t *b, int index, const sch_inst_t *in) {
  tn_buf_printf(b, "[%d, ", index);
  if (in->kind == SCH_SAMPLE_PERFECT_TILE) {
    tn_buf_putc(b, '[');
    for (int i = 0; i < in->ndecision; i++) tn_buf_printf(b, "%s%" PRId64, i ? ", " : "", in->decision[i]);
    tn_buf_putc(b, ']');
  } else {
    tn_buf_printf(b, "%" PRId64, in->decision[0]);
  }
  tn_buf_putc(b, ']');
}

static bool has_decision(const sch_inst_t *in) {
  return sch_inst_is_sampling(in->kind) && in->ndecision > 0 && in->decision;
}

char *sch_trace_to_json(const sch_trace_t *t) {
  tn_buf_t b;
  tn_buf_init(&b);
  namer_t nm;
  namer_init(&nm, t);
  tn_buf_put(&b, "{\n  \"version\": 1,\n  \"trace\": [\n    [");
  for (int i = 0; i < t->n; i++) {
    const sch_inst_t *in = &t->insts[i];
    tn_buf_printf(&b, "%s\n      [\"%s\", ", i ? "," : "", sch_inst_name(in->kind));
    put_args(&b, &nm, in->inputs, in->ninputs, true);
    tn_buf_put(&b, ", ");
    put_args(&b, &nm, in->attrs, in->nattrs, false);
    tn_buf_put(&b, ", ");
    put_outputs(&b, &nm, in);
    tn_buf_putc(&b, ']');
  }
  tn_buf_put(&b, t->n ? "\n    ],\n    [" : "],\n    [");
  int nd = 0;
  for (int i = 0; i < t->n; i++) {
    if (!has_decision(&t->insts[i])) continue;
    tn_buf_put(&b, nd++ ? ",\n      " : "\n      ");
    put_decision(&b, i, &t->insts[i]);
  }
  tn_buf_put(&b, nd ? "\n    ]\n  ]\n}\n" : "]\n  ]\n}\n");
  namer_free(&nm);
  return tn_buf_take(&b);
}

/* ======================================================================
 * Parsing
 * ====================================================================== */

/* cJSON keeps numbers as doubles; the parser reads each number literal again
 * from the text (exact int64, and "1.0" stays a float).  Literals are found
 * in document order, which is cJSON's pre-order. */
typedef struct numtok {
  bool is_float, int_ok;
  int64_t i;
} numtok_t;

/* Handle names -> parse-local RV ids (open addressing). */
typedef struct name_slot {
  const char *name;
  int id, inst;
} name_slot_t;

typedef struct parser {
  tn_arena_t *a; /* scratch for the instructions until they are appended */
  numtok_t *nums;
  int nnums;
  name_slot_t *names;
  int ncap, nnames;
  sch_inst_t *insts;
  int n;
  tn_err_t *err;
} parser_t;

static int count_items(const cJSON *arr) {
  int n = 0;
  for (const cJSON *c = arr->child; c; c = c->next) n++;
  return n;
}

/* "an array of 3 elements", "a float", ... for messages. */
static const char *describe(parser_t *p, const cJSON *j) {
  if (!j) return "nothing";
  if (cJSON_IsArray(j)) return tn_arena_printf(p->a, "an array of %d elements", count_items(j));
  if (cJSON_IsObject(j)) return "an object";
  if (cJSON_IsString(j)) return tn_arena_printf(p->a, "the string \"%.32s\"", j->valuestring);
  if (cJSON_IsNumber(j)) {
    const numtok_t *t = &p->nums[j->valueint];
    return t->is_float ? "a float" : t->int_ok ? "an integer" : "an integer out of the 64-bit range";
  }
  if (cJSON_IsBool(j)) return "a boolean";
  return "null";
}

/* ---- the text ------------------------------------------------------------ */

static void line_col(const char *text, size_t off, int *line, int *col) {
  *line = 1, *col = 1;
  for (size_t i = 0; i < off; i++) {
    if (text[i] == '\n') ++*line, *col = 1;
    else ++*col;
  }
}

static numtok_t read_literal(const char *s, size_t n) {
  char buf[64];
  n = TN_MIN(n, sizeof buf - 1);
  memcpy(buf, s, n);
  buf[n] = 0;
  numtok_t t = {.is_float = strpbrk(buf, ".eE") != NULL};
  if (!t.is_float) {
    errno = 0;
    long long v = strtoll(buf, NULL, 10);
    t.int_ok = errno == 0;
    t.i = v;
  }
  return t;
}

static int scan_numbers(const char *p, size_t n, numtok_t **out) {
  int count = 0, cap = 0;
  bool in_str = false;
  for (size_t i = 0; i < n; i++) {
    char c = p[i];
    if (in_str) {
      if (c == '\\') i++;
      else if (c == '"') in_str = false;
      continue;
    }
    if (c == '"') in_str = true;
    if (c != '-' && !(c >= '0' && c <= '9')) continue;
    size_t j = i;
    while (j < n && p[j] && strchr("0123456789+-eE.", p[j])) j++;
    if (count == cap) *out = tn_xrealloc(*out, sizeof **out * (size_t)(cap = cap ? 2 * cap : 64));
    (*out)[count++] = read_literal(p + i, j - i);
    i = j - 1;
  }
  return count;
}

/* Pre-order numbering of number nodes; valueint (cJSON's clamped copy,
 * unused here) is reused to hold the literal's index. */
static void number_nodes(cJSON *j, int *k) {
  for (; j; j = j->next) {
    if (cJSON_IsNumber(j)) j->valueint = (*k)++;
    number_nodes(j->child, k);
  }
}

static int parse_text(const char *text, size_t len, cJSON **root, parser_t *p, tn_err_t *err) {
  const char *end = NULL;
  *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
  size_t off = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
  if (*root)
    while (off < len && strchr(" \t\r\n", text[off]) && text[off]) off++;
  if (!*root || off < len) {
    int line, col;
    line_col(text, off, &line, &col);
    tn_err_set(err, TN_EINVAL, "trace JSON: %s at line %d, column %d",
               *root ? "unexpected text after the value" : "invalid JSON", line, col);
    err->line = line, err->col = col;
    return TN_EINVAL;
  }
  p->nnums = scan_numbers(text, off, &p->nums);
  int k = 0;
  number_nodes(*root, &k);
  if (k != p->nnums)
    return tn_err_set(err, TN_EINVAL, "trace JSON: cannot match its %d numbers to the text", k);
  return TN_OK;
}

/* ---- handle names -------------------------------------------------------- */

static name_slot_t *name_find(parser_t *p, const char *name) {
  if (!p->ncap) return NULL;
  for (uint64_t h = tn_fnv1a_str(TN_FNV_INIT, name);; h++) {
    name_slot_t *s = &p->names[h & (uint64_t)(p->ncap - 1)];
    if (!s->name || strcmp(s->name, name) == 0) return s;
  }
}

static void name_add(parser_t *p, const char *name, int inst) {
  if (2 * (p->nnames + 1) > p->ncap) {
    name_slot_t *old = p->names;
    int oldcap = p->ncap;
    p->ncap = oldcap ? 2 * oldcap : 256;
    p->names = tn_xcalloc((size_t)p->ncap, sizeof *p->names);
    for (int i = 0; i < oldcap; i++)
      if (old[i].name) *name_find(p, old[i].name) = old[i];
    free(old);
  }
  *name_find(p, name) = (name_slot_t){name, p->nnames++, inst};
}

/* ---- arguments ----------------------------------------------------------- */

/* Where the current error is: "instruction 4 (Split): input 2". */
typedef struct at {
  int inst;
  const char *kind; /* NULL until the name is known */
  char arg[160];
} at_t;

static int fail(parser_t *p, const at_t *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(parser_t *p, const at_t *at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tn_err_vset(p->err, TN_EINVAL, fmt, ap);
  va_end(ap);
  if (at->arg[0]) tn_err_prefix(p->err, "%s", at->arg);
  if (at->kind) return tn_err_prefix(p->err, "instruction %d (%s)", at->inst, at->kind);
  return tn_err_prefix(p->err, "instruction %d", at->inst);
}

static int read_number(parser_t *p, const at_t *at, const cJSON *j, sch_arg_t *out) {
  const numtok_t *t = &p->nums[j->valueint];
  if (t->is_float) {
    *out = sch_arg_float(j->valuedouble);
    return TN_OK;
  }
  if (!t->int_ok) return fail(p, at, "integer %.0f is out of the 64-bit range", j->valuedouble);
  *out = sch_arg_int(t->i);
  return TN_OK;
}

static int read_args(parser_t *p, at_t *at, const cJSON *arr, bool input, int depth, sch_arg_t **out, int *n);

/* Inputs: "None", "\"quoted string\"", a handle name; attrs: plain strings. */
static int read_string(parser_t *p, const at_t *at, const char *s, bool input, sch_arg_t *out) {
  size_t len = strlen(s);
  if (!input) *out = sch_arg_str(tn_arena_strdup(p->a, s));
  else if (strcmp(s, "None") == 0) *out = sch_arg_none();
  else if (len >= 2 && s[0] == '"' && s[len - 1] == '"') *out = sch_arg_str(tn_arena_strndup(p->a, s + 1, len - 2));
  else {
    const name_slot_t *slot = name_find(p, s);
    if (!slot || !slot->name)
      return fail(p, at, "unknown handle '%.64s' (not an output of an earlier instruction; string constants "
                         "are written with extra quotes)", s);
    *out = sch_arg_rv(slot->id);
  }
  return TN_OK;
}

static int read_arg(parser_t *p, at_t *at, const cJSON *j, bool input, int depth, sch_arg_t *out) {
  if (cJSON_IsNumber(j)) return read_number(p, at, j, out);
  if (cJSON_IsBool(j)) {
    *out = sch_arg_int(cJSON_IsTrue(j));
    return TN_OK;
  }
  if (cJSON_IsString(j)) return read_string(p, at, j->valuestring, input, out);
  if (!cJSON_IsArray(j)) return fail(p, at, "expected a number, a string or an array, got %s", describe(p, j));
  if (depth >= TRACE_MAX_NESTING) return fail(p, at, "lists nested deeper than %d levels", TRACE_MAX_NESTING);
  *out = (sch_arg_t){.kind = SCH_ARG_LIST, .rv = SCH_RV_INVALID};
  return read_args(p, at, j, input, depth + 1, &out->items, &out->n);
}

/* Reads an array of arguments; at->arg grows "input 1" -> "input 1[0]". */
static int read_args(parser_t *p, at_t *at, const cJSON *arr, bool input, int depth, sch_arg_t **out, int *n) {
  *n = count_items(arr);
  *out = *n ? TN_NEWN(p->a, sch_arg_t, *n) : NULL;
  char saved[sizeof at->arg];
  memcpy(saved, at->arg, sizeof saved);
  int i = 0;
  for (const cJSON *c = arr->child; c; c = c->next, i++) {
    if (depth == 0) snprintf(at->arg, sizeof at->arg, "%s %d", input ? "input" : "attribute", i);
    else snprintf(at->arg, sizeof at->arg, "%.140s[%d]", saved, i);
    int rc = read_arg(p, at, c, input, depth, &(*out)[i]);
    if (rc < 0) return rc;
  }
  memcpy(at->arg, saved, sizeof saved);
  return TN_OK;
}

/* ---- instructions ---------------------------------------------------------- */

static int read_kind(parser_t *p, at_t *at, const cJSON *j, sch_inst_kind_t *kind) {
  if (!cJSON_IsString(j)) return fail(p, at, "the instruction name must be a string, got %s", describe(p, j));
  if (sch_inst_parse_name(j->valuestring, kind) == TN_OK) {
    at->kind = sch_inst_name(*kind);
    return TN_OK;
  }
  int best = SCH_GET_BLOCK, bestd = 1 << 30;
  for (int k = 0; k < SCH_INST__COUNT; k++) {
    int d = tn_edit_distance(j->valuestring, sch_inst_name((sch_inst_kind_t)k));
    if (d < bestd) best = k, bestd = d;
  }
  if (bestd <= 3)
    return fail(p, at, "unknown instruction '%.64s' (did you mean '%s'?)", j->valuestring,
                sch_inst_name((sch_inst_kind_t)best));
  return fail(p, at, "unknown instruction '%.64s'", j->valuestring);
}

/* An output name: the kind's prefix and digits, not defined before. */
static int read_output(parser_t *p, at_t *at, const cJSON *j, sch_rv_kind_t kind, sch_rv_t *rv) {
  static const char *const kind_names[] = {"a block", "a loop", "an expression"};
  if (!cJSON_IsString(j)) return fail(p, at, "expected a handle name, got %s", describe(p, j));
  const char *s = j->valuestring;
  size_t digits = strspn(s + (s[0] ? 1 : 0), "0123456789");
  if (s[0] != rv_prefix[kind] || digits == 0 || digits > 9 || s[1 + digits])
    return fail(p, at, "'%.64s' is not a valid name for %s handle (expected %c<number>, e.g. %c0)", s,
                kind_names[kind], rv_prefix[kind], rv_prefix[kind]);
  const name_slot_t *slot = name_find(p, s);
  if (slot && slot->name) return fail(p, at, "duplicate handle name '%s' (already defined by instruction %d)", s, slot->inst);
  name_add(p, s, at->inst);
  *rv = p->nnames - 1;
  return TN_OK;
}

static int read_outputs(parser_t *p, at_t *at, const cJSON *arr, sch_inst_t *in) {
  in->noutputs = count_items(arr);
  if (in->noutputs > SCH_MAX_RVS_OUT)
    return fail(p, at, "%d outputs; at most %d are possible", in->noutputs, SCH_MAX_RVS_OUT);
  in->outputs = in->noutputs ? TN_NEWN(p->a, sch_rv_t, in->noutputs) : NULL;
  int i = 0;
  for (const cJSON *c = arr->child; c; c = c->next, i++) {
    snprintf(at->arg, sizeof at->arg, "output %d", i);
    int rc = read_output(p, at, c, sch_inst_output_kind(in->kind), &in->outputs[i]);
    if (rc < 0) return rc;
  }
  at->arg[0] = 0;
  return TN_OK;
}

/* [name, inputs, attrs, outputs] */
static int read_inst(parser_t *p, int index, const cJSON *j, sch_inst_t *in) {
  static const char *const parts[] = {"name", "inputs", "attributes", "outputs"};
  at_t at = {.inst = index};
  const cJSON *f[4] = {0};
  int n = 0, rc;
  for (const cJSON *c = cJSON_IsArray(j) ? j->child : NULL; c; c = c->next, n++)
    if (n < 4) f[n] = c;
  if (n >= 1 && (rc = read_kind(p, &at, f[0], &in->kind)) < 0) return rc;
  if (!cJSON_IsArray(j) || n != 4)
    return fail(p, &at, "expected [name, [inputs], [attributes], [outputs]], got %s", describe(p, j));
  for (int i = 1; i < 4; i++)
    if (!cJSON_IsArray(f[i])) return fail(p, &at, "the %s must be an array, got %s", parts[i], describe(p, f[i]));
  if ((rc = read_args(p, &at, f[1], true, 0, &in->inputs, &in->ninputs)) < 0 ||
      (rc = read_args(p, &at, f[2], false, 0, &in->attrs, &in->nattrs)) < 0)
    return rc;
  return read_outputs(p, &at, f[3], in);
}

static int read_instructions(parser_t *p, const cJSON *arr) {
  if (!cJSON_IsArray(arr)) return tn_err_set(p->err, TN_EINVAL, "trace: the instruction list must be an array, got %s", describe(p, arr));
  int n = count_items(arr);
  if (n > TRACE_MAX_INSTS)
    return tn_err_set(p->err, TN_EINVAL, "trace: %d instructions; at most %d are accepted", n, TRACE_MAX_INSTS);
  p->insts = n ? TN_NEWN(p->a, sch_inst_t, n) : NULL;
  for (const cJSON *c = arr->child; c; c = c->next, p->n++) {
    int rc = read_inst(p, p->n, c, &p->insts[p->n]);
    if (rc < 0) return rc;
  }
  return TN_OK;
}

/* ---- decisions ------------------------------------------------------------- */

static int read_int(parser_t *p, const cJSON *j, int64_t *v) {
  if (!cJSON_IsNumber(j) || p->nums[j->valueint].is_float || !p->nums[j->valueint].int_ok) return TN_EINVAL;
  *v = p->nums[j->valueint].i;
  return TN_OK;
}

static int read_decision_value(parser_t *p, int d, int64_t idx, const cJSON *j, sch_inst_t *in) {
  const char *name = sch_inst_name(in->kind);
  if (in->kind != SCH_SAMPLE_PERFECT_TILE) {
    in->decision = TN_NEW(p->a, int64_t);
    in->ndecision = 1;
    if (read_int(p, j, in->decision) < 0)
      return tn_err_set(p->err, TN_EINVAL, "decision %d (instruction %" PRId64 ", %s): expected an integer, got %s", d,
                        idx, name, describe(p, j));
    return TN_OK;
  }
  int n = cJSON_IsArray(j) ? count_items(j) : -1;
  if (n != in->noutputs)
    return tn_err_set(p->err, TN_EINVAL, "decision %d (instruction %" PRId64 ", %s): expected an array of %d integers (one per output), got %s",
                      d, idx, name, in->noutputs, describe(p, j));
  in->decision = n ? TN_NEWN(p->a, int64_t, n) : NULL;
  in->ndecision = n;
  int i = 0;
  for (const cJSON *c = j->child; c; c = c->next, i++)
    if (read_int(p, c, &in->decision[i]) < 0)
      return tn_err_set(p->err, TN_EINVAL, "decision %d (instruction %" PRId64 ", %s): factor %d must be an integer, got %s",
                        d, idx, name, i, describe(p, c));
  return TN_OK;
}

/* [instruction index, value] */
static int read_decision(parser_t *p, int d, const cJSON *j) {
  const cJSON *idx_j = cJSON_IsArray(j) ? j->child : NULL;
  int64_t idx;
  if (!idx_j || !idx_j->next || idx_j->next->next)
    return tn_err_set(p->err, TN_EINVAL, "decision %d: expected [instruction index, value], got %s", d, describe(p, j));
  if (read_int(p, idx_j, &idx) < 0)
    return tn_err_set(p->err, TN_EINVAL, "decision %d: the instruction index must be an integer, got %s", d, describe(p, idx_j));
  if (idx < 0 || idx >= p->n)
    return tn_err_set(p->err, TN_EINVAL, "decision %d: instruction index %" PRId64 " is out of range (the trace has %d instructions)",
                      d, idx, p->n);
  sch_inst_t *in = &p->insts[idx];
  if (!sch_inst_is_sampling(in->kind))
    return tn_err_set(p->err, TN_EINVAL, "decision %d: instruction %" PRId64 " (%s) is not a sampling instruction and takes no decision",
                      d, idx, sch_inst_name(in->kind));
  if (in->decision || in->ndecision)
    return tn_err_set(p->err, TN_EINVAL, "decision %d: instruction %" PRId64 " (%s) already has a decision", d, idx,
                      sch_inst_name(in->kind));
  return read_decision_value(p, d, idx, idx_j->next, in);
}

static int read_decisions(parser_t *p, const cJSON *arr) {
  if (!cJSON_IsArray(arr)) return tn_err_set(p->err, TN_EINVAL, "trace: the decision list must be an array, got %s", describe(p, arr));
  int d = 0;
  for (const cJSON *c = arr->child; c; c = c->next, d++) {
    int rc = read_decision(p, d, c);
    if (rc < 0) return rc;
  }
  return TN_OK;
}

/* ---- the whole trace ------------------------------------------------------- */

/* {"version": 1, "trace": [...]} or the bare [instructions, decisions]. */
static int unwrap(parser_t *p, const cJSON *root, const cJSON **trace) {
  *trace = root;
  if (cJSON_IsObject(root)) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "version");
    int64_t version;
    if (!v) return tn_err_set(p->err, TN_EINVAL, "trace JSON: missing \"version\" (expected {\"version\": 1, \"trace\": [...]})");
    if (read_int(p, v, &version) < 0)
      return tn_err_set(p->err, TN_EINVAL, "trace JSON: \"version\" must be the integer 1, got %s", describe(p, v));
    if (version != 1)
      return tn_err_set(p->err, TN_EINVAL, "trace JSON: unsupported version %" PRId64 " (this build reads version 1)", version);
    if (!(*trace = cJSON_GetObjectItemCaseSensitive(root, "trace")))
      return tn_err_set(p->err, TN_EINVAL, "trace JSON: missing \"trace\" (expected {\"version\": 1, \"trace\": [instructions, decisions]})");
  }
  int n = cJSON_IsArray(*trace) ? count_items(*trace) : -1;
  if (n != 2)
    return tn_err_set(p->err, TN_EINVAL,
                      "trace JSON: expected {\"version\": 1, \"trace\": [instructions, decisions]} or "
                      "[instructions, decisions], got %s",
                      describe(p, *trace));
  return TN_OK;
}

int sch_trace_from_json(const char *text, size_t len, sch_trace_t **out, tn_err_t *err) {
  tn_err_t local;
  if (!err) err = &local;
  tn_err_clear(err);
  *out = NULL;
  if (!text) return tn_err_set(err, TN_EINVAL, "trace JSON: no text");
  if (len > TRACE_MAX_BYTES)
    return tn_err_set(err, TN_EINVAL, "trace JSON: %zu bytes; at most %u are accepted", len, TRACE_MAX_BYTES);
  parser_t p = {.a = tn_arena_new(), .err = err};
  cJSON *root = NULL;
  const cJSON *trace;
  int rc = parse_text(text, len, &root, &p, err);
  if (rc == TN_OK) rc = unwrap(&p, root, &trace);
  if (rc == TN_OK) rc = read_instructions(&p, trace->child);
  if (rc == TN_OK) rc = read_decisions(&p, trace->child->next);
  if (rc == TN_OK) {
    *out = sch_trace_new();
    for (int i = 0; i < p.n; i++) sch_trace_append(*out, &p.insts[i]);
  }
  cJSON_Delete(root);
  free(p.nums);
  free(p.names);
  tn_arena_free(p.a);
  return rc;
}
