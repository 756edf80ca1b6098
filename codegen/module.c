/* module.c — cg_lower: runs the analyses, prints the C function (with its
 * heap temporaries and the tuned_entry_<entry> wrapper) or one GPU kernel per root
 * statement (with shared declarations and launch extents), and assembles
 * the module; plus target names and the launch configuration as JSON. */
#include "cg_internal.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const target_names[] = {"c", "cuda", "opencl"};

const char *cg_target_name(cg_target_t t) {
  return (unsigned)t < TN_ARRAY_LEN(target_names) ? target_names[t] : "?";
}

int cg_target_parse(const char *s, cg_target_t *out) {
  for (size_t i = 0; i < TN_ARRAY_LEN(target_names); i++)
    if (s && strcmp(s, target_names[i]) == 0) {
      *out = (cg_target_t)i;
      return TN_OK;
    }
  if (s && strcmp(s, "cpu") == 0) {
    *out = CG_TARGET_C;
    return TN_OK;
  }
  return TN_EINVAL;
}

/* ---- shared pieces -------------------------------------------------------- */

/* Global temporaries that GPU kernels take as workspace arguments. */
static bool is_workspace(const cg_buf_t *cb) {
  return cb->b && cb->param && cb->b->role == IR_BUF_TEMP;
}

/* unalias: NULL, or per buffer id whether the argument must not be
 * restrict-qualified (see kernel_unalias). */
static void arg_decl(cg_ctx_t *c, const cg_buf_t *cb, const bool *unalias, int n, tn_buf_t *o) {
  if (cb->b->dtype == IR_FLOAT64) c->need_fp64 = true;
  bool restrict_ok = !unalias || !unalias[cb->b->id];
  tn_buf_printf(o, "%s%s%s *%s%s%s", n ? ", " : "", c->d->ptr_space, cg_storage_type(c, cb->b),
                restrict_ok ? c->d->restrict_kw : "", restrict_ok ? " " : "", cb->name);
}

/* Arguments: the function's parameters, then workspaces. */
static void arg_list(cg_ctx_t *c, const bool *unalias, tn_buf_t *o) {
  int n = 0;
  for (int p = 0; p < c->f->nparams; p++) arg_decl(c, &c->bufs[c->f->params[p]->id], unalias, n++, o);
  for (int i = 0; i < c->nbufs; i++)
    if (is_workspace(&c->bufs[i])) arg_decl(c, &c->bufs[i], unalias, n++, o);
}

/* Conversions between float and IEEE half bits for the C target (the same
 * rounding as tn_float_to_half: to nearest even). */
static const char c_half_helpers[] =
    "static inline float tuned_h2f(uint16_t h) {\n"
    "  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;\n"
    "  if (e == 0 && m == 0) x = sign;\n"
    "  else if (e == 0) {\n"
    "    int k = -1;\n"
    "    do { m <<= 1; k++; } while (!(m & 0x400u));\n"
    "    x = sign | ((uint32_t)(127 - 15 - k) << 23) | ((m & 0x3ffu) << 13);\n"
    "  } else if (e == 0x1f) x = sign | 0x7f800000u | (m << 13);\n"
    "  else x = sign | ((e + 127 - 15) << 23) | (m << 13);\n"
    "  union { uint32_t u; float f; } v;\n"
    "  v.u = x;\n"
    "  return v.f;\n"
    "}\n"
    "static inline uint16_t tuned_f2h(float f) {\n"
    "  union { float f; uint32_t u; } v;\n"
    "  v.f = f;\n"
    "  uint32_t x = v.u, sign = (x >> 16) & 0x8000u, e8 = (x >> 23) & 0xffu, m = x & 0x7fffffu;\n"
    "  if (e8 == 0xff) return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0));\n"
    "  int e = (int)e8 - 127 + 15;\n"
    "  if (e >= 0x1f) return (uint16_t)(sign | 0x7c00u);\n"
    "  if (e <= 0) {\n"
    "    if (e < -10) return (uint16_t)sign;\n"
    "    m |= 0x800000u;\n"
    "    int s = 14 - e;\n"
    "    uint32_t h = m >> s, rem = m & ((1u << s) - 1), mid = 1u << (s - 1);\n"
    "    if (rem > mid || (rem == mid && (h & 1u))) h++;\n"
    "    return (uint16_t)(sign | h);\n"
    "  }\n"
    "  uint32_t h = sign | ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fffu;\n"
    "  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;\n"
    "  return (uint16_t)h;\n"
    "}\n";

/* bfloat16 <-> float for C and OpenCL (the rounding of tn_float_to_bf16). */
static const char c_bf16_helpers[] =
    "static inline float tuned_bf2f(uint16_t h) {\n"
    "  union { uint32_t u; float f; } v;\n"
    "  v.u = (uint32_t)h << 16;\n"
    "  return v.f;\n"
    "}\n"
    "static inline uint16_t tuned_f2bf(float f) {\n"
    "  union { float f; uint32_t u; } v;\n"
    "  v.f = f;\n"
    "  if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40u);\n"
    "  return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);\n"
    "}\n";
static const char opencl_bf16_helpers[] =
    "static inline float tuned_bf2f(ushort h) { return as_float((uint)h << 16); }\n"
    "static inline ushort tuned_f2bf(float f) {\n"
    "  uint u = as_uint(f);\n"
    "  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);\n"
    "  return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);\n"
    "}\n";

/* Single-precision exp and tanh for C, written without branches or calls so
 * that GCC vectorises them where they are inlined (libm's expf/tanhf are
 * scalar calls without -ffast-math: 13 ns per element here, half of
 * dense+bias+GELU 128x768x3072's time on one core).  Checked against exp/tanh in double over every
 * float (gcc -O2 -march=native, with FMA contraction): expf within 0.90 ulp
 * where the result is normal, tanhf within 1.37 ulp; NaN stays NaN, overflow
 * gives inf, underflow goes gradually to 0.
 * expf: x = n ln2 + r, |r| <= ln2/2 (n rounded with the 1.5 * 2^23 trick,
 * ln2 split in two so k * ln2_hi is exact); e^r by a minimax polynomial of
 * degree 6 (relative error 3.6e-9 on that range; the Taylor series to r^7
 * that it replaced took one multiply-add more, 3.5 % of softmax's time on
 * one core); 2^n as two factors so that n from -150 to 128 needs no
 * special case.  x is first clamped to [-104, 89] on its bits, as
 * integers (unsigned: -104 and every float below it, -inf and negative
 * NaNs, are the largest negative patterns; signed: 89 and above, inf and
 * positive NaNs), and a NaN given back at the end: written as float
 * selects, GCC evaluates the clamped lanes as constants of their own, under
 * masks, 13 % of softmax's time on one core.  tanhf: below |x| = 0.625 an odd polynomial
 * (least squares in x^2 on Chebyshev nodes, relative error 7e-9), above it
 * 1 - 2 / (e^2|x| + 1), whose cancellation costs under one ulp there; the
 * sign is x's (tanh(-0) = -0). */
static const char c_exp_helper[] =
    "static inline float tuned_expf(float x) {\n"
    "  union { float f; uint32_t u; int32_t i; } c, t, s1, s2;\n"
    "  c.f = x;\n"
    "  c.u = c.u < 0xc2d00000u ? c.u : 0xc2d00000u;\n"
    "  c.i = c.i < 0x42b20000 ? c.i : 0x42b20000;\n"
    "  float y = c.f;\n"
    "  t.f = y * 1.44269504f + 12582912.0f;\n"
    "  int32_t n = (int32_t)(t.u - 0x4b400000u), n1 = n >> 1;\n"
    "  float k = t.f - 12582912.0f;\n"
    "  float r = y - k * 0.693145752f - k * 1.42860677e-6f;\n"
    "  float p = 1.375175896e-3f;\n"
    "  p = p * r + 8.368914947e-3f;\n"
    "  p = p * r + 4.166952521e-2f;\n"
    "  p = p * r + 1.666651815e-1f;\n"
    "  p = p * r + 4.999998808e-1f;\n"
    "  p = p * r + 1.0f;\n"
    "  p = p * r + 1.0f;\n"
    "  s1.u = (uint32_t)(n1 + 127) << 23;\n"
    "  s2.u = (uint32_t)(n - n1 + 127) << 23;\n"
    "  y = p * s1.f * s2.f;\n"
    "  return x == x ? y : x;\n"
    "}\n";
static const char c_tanh_helper[] =
    "static inline float tuned_tanhf(float x) {\n"
    "  float a = fabsf(x), u = x * x;\n"
    "  float q = -5.704158451e-03f;\n"
    "  q = q * u + 2.063797973e-02f;\n"
    "  q = q * u - 5.373919755e-02f;\n"
    "  q = q * u + 1.333143264e-01f;\n"
    "  q = q * u - 3.333328068e-01f;\n"
    "  float y = a < 0.625f ? a + a * u * q : 1.0f - 2.0f / (tuned_expf(2.0f * a) + 1.0f);\n"
    "  return copysignf(y, x);\n"
    "}\n";

/* The team of an OpenMP parallel loop.  On a machine other processes
 * share, a team thread that one of them preempts holds the loop at its
 * closing barrier for a scheduler slice (milliseconds, hundreds of times a
 * small kernel's time); a team that leaves the busy cores to them does not
 * wait.  At most every few milliseconds the kernel reads the number of
 * runnable tasks (/proc/loadavg) and takes the cores they leave free,
 * counting its own last team as its own: at least one thread, at most
 * OpenMP's.  TUNED_THREADS=fixed, no /proc/loadavg, or a build without
 * OpenMP: OpenMP's team as it is. */
static const char c_team_helper[] =
    "#include <fcntl.h>\n"
    "#include <string.h>\n"
    "#include <time.h>\n"
    "#include <unistd.h>\n"
    "#ifdef _OPENMP\n"
    "#include <omp.h>\n"
    "static int tuned_team(void) {\n"
    "  static int fd = -2, team;\n"
    "  static long long next_ns;\n"
    "  struct timespec ts;\n"
    "  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);\n"
    "  long long now = ts.tv_sec * 1000000000LL + ts.tv_nsec;\n"
    "  int t = __atomic_load_n(&team, __ATOMIC_RELAXED), most = omp_get_max_threads();\n"
    "  if (t > 0 && now < __atomic_load_n(&next_ns, __ATOMIC_RELAXED)) return t;\n"
    "  int f = __atomic_load_n(&fd, __ATOMIC_ACQUIRE);\n"
    "  if (f == -2) {\n"
    "    const char *e = getenv(\"TUNED_THREADS\");\n"
    "    int mine = e && !strcmp(e, \"fixed\") ? -1 : open(\"/proc/loadavg\", O_RDONLY | O_CLOEXEC);\n"
    "    if (!__atomic_compare_exchange_n(&fd, &f, mine, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) && mine >= 0)\n"
    "      close(mine);\n"
    "    f = __atomic_load_n(&fd, __ATOMIC_ACQUIRE);\n"
    "  }\n"
    "  char buf[128];\n"
    "  ssize_t n = f >= 0 ? pread(f, buf, sizeof buf - 1, 0) : -1;\n"
    "  int running = 0, spaces = 0;\n"
    "  for (ssize_t i = 0; i < n && spaces < 4; i++) {\n"
    "    if (buf[i] == ' ') spaces++;\n"
    "    else if (spaces == 3 && buf[i] >= '0' && buf[i] <= '9') running = running * 10 + (buf[i] - '0');\n"
    "    else if (spaces == 3) break;\n"
    "  }\n"
    "  int want = running > 0 ? omp_get_num_procs() - running + (t > 0 ? t : 1) : most;\n"
    "  want = want < 1 ? 1 : want > most ? most : want;\n"
    "  __atomic_store_n(&team, want, __ATOMIC_RELAXED);\n"
    "  __atomic_store_n(&next_ns, now + 2000000LL, __ATOMIC_RELAXED);\n"
    "  return want;\n"
    "}\n"
    "#else\n"
    "static int tuned_team(void) { return 1; }\n"
    "#endif\n";

static void helper_text(cg_ctx_t *c, tn_buf_t *o);

/* Appends the helper functions the printed code called, and a blank line. */
static void emit_helpers(cg_ctx_t *c, tn_buf_t *src) {
  tn_buf_t h;
  tn_buf_init(&h);
  helper_text(c, &h);
  if (h.len) tn_buf_printf(src, "%s\n", tn_buf_str(&h));
  tn_buf_free(&h);
}

static void helper_text(cg_ctx_t *c, tn_buf_t *o) {
  const char *q = c->d->helper_qual;
  for (int w = 0; w < 2; w++) {
    const char *t = c->d->compute[w ? IR_INT64 : IR_INT32], *sfx = w ? "i64" : "i32";
    if (c->need_fdiv[w]) {
      tn_buf_printf(o,
                    "%s %s tuned_floordiv_%s(%s a, %s b) {\n  %s q = a / b;\n"
                    "  return (a %% b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;\n}\n",
                    q, t, sfx, t, t, t);
      tn_buf_printf(o,
                    "%s %s tuned_floormod_%s(%s a, %s b) {\n  %s r = a %% b;\n"
                    "  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n}\n",
                    q, t, sfx, t, t, t);
    }
    if (c->need_minmax[w]) {
      tn_buf_printf(o, "%s %s tuned_min_%s(%s a, %s b) { return a < b ? a : b; }\n", q, t, sfx, t, t);
      tn_buf_printf(o, "%s %s tuned_max_%s(%s a, %s b) { return a > b ? a : b; }\n", q, t, sfx, t, t);
    }
  }
  if (c->need_half && c->d->target == CG_TARGET_C) tn_buf_put(o, c_half_helpers);
  if (c->need_bf16 && c->d->target == CG_TARGET_C) tn_buf_put(o, c_bf16_helpers);
  if (c->need_expf && c->d->target == CG_TARGET_C) tn_buf_put(o, c_exp_helper);
  if (c->need_tanhf && c->d->target == CG_TARGET_C) tn_buf_put(o, c_tanh_helper);
  for (int w = 0; w < 2; w++) /* fmaxf's value (a NaN operand loses) as a compare and select */
    if (c->need_fminmax[w] && c->d->target == CG_TARGET_C) {
      const char *t = w ? "double" : "float", *sfx = w ? "" : "f";
      tn_buf_printf(o, "static inline %s tuned_fmax%s(%s a, %s b) { return a > b || b != b ? a : b; }\n", t, sfx, t, t);
      tn_buf_printf(o, "static inline %s tuned_fmin%s(%s a, %s b) { return a < b || b != b ? a : b; }\n", t, sfx, t, t);
    }
  if (c->need_team && c->d->target == CG_TARGET_C) tn_buf_put(o, c_team_helper);
  if (c->need_bf16 && c->d->target == CG_TARGET_OPENCL) tn_buf_put(o, opencl_bf16_helpers);
  if (c->need_cp_async && c->d->target == CG_TARGET_CUDA) tn_buf_put(o, cg_cp_async_helpers);
  cg_intrin_helpers(c, o);
  cg_hopper_gemm_helpers(c, o);
}

/* ---- C ------------------------------------------------------------------------ */

static bool heap_buf(const cg_buf_t *cb) { return cb->b && cb->heap && cb->used; }

static void emit_c_heap(cg_ctx_t *c) {
  tn_buf_t cond, frees;
  tn_buf_init(&cond);
  tn_buf_init(&frees);
  for (int i = 0; i < c->nbufs; i++) {
    const cg_buf_t *cb = &c->bufs[i];
    if (!heap_buf(cb)) continue;
    const char *t = cg_storage_type(c, cb->b);
    cg_line(c, "%s *%s = (%s *)malloc(sizeof(%s) * %lld);", t, cb->name, t, t, (long long)cg_buf_numel(cb));
    tn_buf_printf(&cond, "%s!%s", cond.len ? " || " : "", cb->name);
    tn_buf_printf(&frees, "free(%s); ", cb->name);
  }
  if (cond.len) {
    cg_line(c, "if (%s) {", tn_buf_str(&cond));
    cg_line(c, "  %sreturn -1;", tn_buf_str(&frees));
    cg_line(c, "}");
  }
  tn_buf_free(&cond);
  tn_buf_free(&frees);
}

/* Argument n in arg_list's order (parameters, then workspaces and packed
 * copies), NULL past the last. */
static const ir_buffer_t *arg_at(const cg_ctx_t *c, int n) {
  if (n < c->f->nparams) return c->f->params[n];
  n -= c->f->nparams;
  for (int i = 0; i < c->nbufs; i++)
    if (is_workspace(&c->bufs[i]) && n-- == 0) return c->bufs[i].b;
  return NULL;
}

int cg_arg_index(const cg_ctx_t *c, const ir_buffer_t *b) {
  for (int n = 0; arg_at(c, n); n++)
    if (arg_at(c, n) == b) return n;
  return -1;
}

/* The hoisted packing nest of root k as a function of its own:
 * int <entry>_pack_<input>(const T *input, T *packed). */
static void emit_c_pack(cg_ctx_t *c, int k) {
  const ir_block_t *b = c->pack_blk[k];
  const cg_buf_t *in = &c->bufs[b->reads[0].buf->id], *out = &c->bufs[b->writes[0].buf->id];
  cg_line(c, "int %s(const %s *restrict %s, %s *restrict %s) {", c->pack_fn[k], cg_storage_type(c, in->b), in->name,
          cg_storage_type(c, out->b), out->name);
  c->ind = 1;
  cg_line(c, "int tuned_status = 0;");
  cg_emit_stmt(c, c->roots[k]);
  cg_line(c, "return tuned_status;");
  c->ind = 0;
  cg_line(c, "}");
  cg_line(c, "%s", "");
}

/* tuned_entry_<entry>(void **args) calls the kernel on the arguments;
 * with hoisted packing, tuned_pack_<entry>(void **args) every packing
 * function on the same array. */
static void emit_c_wrappers(cg_ctx_t *c) {
  tn_buf_t call;
  tn_buf_init(&call);
  const ir_buffer_t *b;
  for (int n = 0; (b = arg_at(c, n)); n++)
    tn_buf_printf(&call, "%s(%s *)args[%d]", n ? ", " : "", cg_storage_type(c, b), n);
  cg_line(c, "int tuned_entry_%s(void **args) {", c->entry);
  cg_line(c, "  return %s(%s);", c->entry, tn_buf_str(&call));
  cg_line(c, "}");
  tn_buf_free(&call);
  bool any = false;
  for (int k = 0; k < c->nroots; k++) any |= c->pack_blk[k] != NULL;
  if (!any) return;
  cg_line(c, "int tuned_pack_%s(void **args) {", c->entry);
  cg_line(c, "  int rc = 0;");
  for (int k = 0; k < c->nroots; k++) {
    const ir_block_t *pb = c->pack_blk[k];
    if (!pb) continue;
    const ir_buffer_t *in = pb->reads[0].buf, *out = pb->writes[0].buf;
    cg_line(c, "  if (!rc) rc = %s((const %s *)args[%d], (%s *)args[%d]);", c->pack_fn[k], cg_storage_type(c, in),
            cg_arg_index(c, in), cg_storage_type(c, out), cg_arg_index(c, out));
  }
  cg_line(c, "  return rc;");
  cg_line(c, "}");
}

static void emit_c(cg_ctx_t *c, cg_module_t *m, tn_buf_t *src) {
  tn_buf_t body, args;
  tn_buf_init(&body);
  tn_buf_init(&args);
  c->o = &body;
  arg_list(c, NULL, &args);
  cg_line(c, "int %s(%s) {", c->entry, tn_buf_str(&args));
  c->ind = 1;
  cg_line(c, "int tuned_status = 0;");
  emit_c_heap(c);
  for (int k = 0; k < c->nroots; k++)
    if (!c->pack_blk[k]) cg_emit_stmt(c, c->roots[k]);
  for (int i = 0; i < c->nbufs; i++)
    if (heap_buf(&c->bufs[i])) cg_line(c, "free(%s);", c->bufs[i].name);
  cg_line(c, "return tuned_status;");
  c->ind = 0;
  cg_line(c, "}");
  cg_line(c, "%s", "");
  for (int k = 0; k < c->nroots; k++)
    if (c->pack_blk[k]) emit_c_pack(c, k);
  emit_c_wrappers(c);

  tn_buf_printf(src, "/* Generated by tuned: target c, entry %s. */\n", c->entry);
  if (c->need_team) /* tuned_team's pread, CLOCK_MONOTONIC_COARSE */
    tn_buf_put(src, "#ifndef _GNU_SOURCE\n#define _GNU_SOURCE\n#endif\n");
  tn_buf_put(src, "#include <math.h>\n#include <stdint.h>\n#include <stdlib.h>\n\n");
  emit_helpers(c, src);
  cg_intrin_entry_attr(c, src);
  tn_buf_put(src, tn_buf_str(&body));
  tn_buf_free(&body);
  tn_buf_free(&args);

  m->nkernels = 1;
  m->kernels = tn_xcalloc(1, sizeof(cg_kernel_t));
  snprintf(m->kernels[0].name, sizeof m->kernels[0].name, "%s", c->entry);
  for (int a = 0; a < 3; a++) m->kernels[0].grid[a] = m->kernels[0].block[a] = 1;
}

/* ---- GPU ------------------------------------------------------------------------ */

static bool is_kernel_shared(const cg_ctx_t *c, const cg_buf_t *cb) {
  return cb->b && cb->sized && cb->used && cb->kernel == c->kernel && cb->b->scope == IR_SCOPE_SHARED;
}

/* The kernel's shared arrays: static __shared__ arrays, or on CUDA above
 * what static arrays may hold (the target's max_shared_memory_per_block), pointers into one dynamic shared array
 * (16-byte aligned each) whose size the launch passes; the host harness
 * sees a static array of that size instead. */
/* Shared arrays at 16 bytes (float4), or 32 in a kernel whose warps load
 * tensor-core tiles from them (load_matrix_sync needs 256-bit addresses). */
static void shared_decls(cg_ctx_t *c, cg_kernel_t *kd) {
  int64_t total = 0, al = cg_wmma_kernel(c, c->kernel) ? 32 : 16;
  for (int i = 0; i < c->nbufs; i++)
    if (is_kernel_shared(c, &c->bufs[i]))
      total += (cg_buf_numel(&c->bufs[i]) * cg_elem_bytes(c, c->bufs[i].b) + al - 1) / al * al;
  bool dyn = c->d->target == CG_TARGET_CUDA && total > c->static_shared_max;
  if (dyn) {
    tn_buf_printf(&c->shared,
                  "#ifdef TUNED_CUDA_HOST_H\n  __shared__ __align__(%lld) unsigned char tuned_dyn_shared[%lld];\n"
                  "#else\n  extern __shared__ __align__(%lld) unsigned char tuned_dyn_shared[];\n#endif\n",
                  (long long)al, (long long)total, (long long)al);
    kd->dyn_shared_bytes = total;
  }
  int64_t off = 0;
  for (int i = 0; i < c->nbufs; i++) {
    const cg_buf_t *cb = &c->bufs[i];
    if (!is_kernel_shared(c, cb)) continue;
    int64_t bytes = cg_buf_numel(cb) * cg_elem_bytes(c, cb->b);
    const char *t = cg_storage_type(c, cb->b);
    if (dyn) {
      tn_buf_printf(&c->shared, "  %s *%s = (%s *)(tuned_dyn_shared + %lld);  /* %lld elements */\n", t, cb->name,
                    t, (long long)off, (long long)cg_buf_numel(cb));
      off += (bytes + al - 1) / al * al;
    } else {
      tn_buf_printf(&c->shared, "  %s%s %s[%lld];\n", cb->wmma_operand ? "__shared__ __align__(32) " : c->d->shared_decl,
                    t, cb->name, (long long)cg_buf_numel(cb));
      c->shared_bytes += bytes;
    }
  }
}

typedef struct rw_acc {
  uint8_t *rw; /* per buffer id: 1 read, 2 written */
  int nbufs;
} rw_acc_t;

static bool rw_visit(ir_stmt_t *s, void *p) {
  rw_acc_t *a = p;
  if (s->kind != IR_S_BLOCK) return s->kind != IR_S_STORE;
  const ir_block_t *b = &s->u.block;
  for (int r = 0; r < b->nreads; r++)
    if (b->reads[r].buf->id >= 0 && b->reads[r].buf->id < a->nbufs) a->rw[b->reads[r].buf->id] |= 1;
  for (int w = 0; w < b->nwrites; w++)
    if (b->writes[w].buf->id >= 0 && b->writes[w].buf->id < a->nbufs) a->rw[b->writes[w].buf->id] |= 2;
  return true;
}

/* The global buffers kernel k both writes and reads lose `restrict`: one
 * thread may write what another reads after a barrier (a softmax row's sum,
 * written by thread 0 and read by all), and under `restrict` NVRTC moved the
 * other threads' read above the barrier (seen on an H100: the kernel
 * divided by stale memory; the host harness and PoCL ran it right). */
static bool *kernel_unalias(const cg_ctx_t *c, int k) {
  rw_acc_t a = {tn_xcalloc((size_t)c->nbufs + 1, 1), c->nbufs};
  ir_stmt_walk((ir_stmt_t *)c->roots[k], rw_visit, &a);
  bool *out = tn_xcalloc((size_t)c->nbufs + 1, sizeof *out);
  for (int i = 0; i < c->nbufs; i++) out[i] = a.rw[i] == 3;
  free(a.rw);
  return out;
}

static void emit_kernel(cg_ctx_t *c, int k, cg_kernel_t *kd, tn_buf_t *out) {
  snprintf(kd->name, sizeof kd->name, "%s_kernel%d", c->entry, k);
  if (cg_kernel_dims(c, k, kd->grid, kd->block)) return;
  tn_buf_t argbuf;
  tn_buf_init(&argbuf);
  bool *unalias = kernel_unalias(c, k);
  arg_list(c, unalias, &argbuf);
  free(unalias);
  const char *args = tn_buf_str(&argbuf);
  if (cg_hopper_gemm_kernel(c, k)) {
    cg_hopper_gemm_emit(c, k, kd, args, out);
    tn_buf_free(&argbuf);
    return;
  }
  c->kernel = k;
  memcpy(c->grid, kd->grid, sizeof c->grid);
  memcpy(c->block, kd->block, sizeof c->block);
  memset(c->pend_w, 0, (size_t)c->nbufs);
  memset(c->read_since, 0, (size_t)c->nbufs);
  tn_buf_reset(&c->shared);
  c->shared_bytes = 0;
  kd->dyn_shared_bytes = 0;
  shared_decls(c, kd);
  tn_buf_t body;
  tn_buf_init(&body);
  c->o = &body;
  c->ind = 1;
  cg_emit_allocs(c, NULL);
  cg_emit_stmt(c, c->roots[k]);
  kd->static_shared_bytes = c->shared_bytes;
  int64_t threads = kd->block[0] * kd->block[1] * kd->block[2];
  /* the block size as a compile-time hint: __launch_bounds__ (CUDA, at most
   * 1024 threads compile) or reqd_work_group_size (OpenCL) */
  if (c->d->target == CG_TARGET_CUDA && threads <= 1024)
    tn_buf_printf(out, "%s void __launch_bounds__(%lld) %s(%s) {\n", c->d->kernel_decl,
                  (long long)threads, kd->name, args);
  else if (c->d->target == CG_TARGET_CUDA)
    tn_buf_printf(out, "%s void %s(%s) {\n", c->d->kernel_decl, kd->name, args);
  else
    tn_buf_printf(out, "%s __attribute__((reqd_work_group_size(%lld, %lld, %lld))) void %s(%s) {\n",
                  c->d->kernel_decl, (long long)kd->block[0], (long long)kd->block[1],
                  (long long)kd->block[2], kd->name, args);
  tn_buf_put(out, tn_buf_str(&c->shared));
  tn_buf_put(out, tn_buf_str(&body));
  tn_buf_put(out, "}\n\n");
  tn_buf_free(&body);
  tn_buf_free(&argbuf);
}

static void emit_gpu(cg_ctx_t *c, cg_module_t *m, tn_buf_t *src) {
  tn_buf_t kernels;
  tn_buf_init(&kernels);
  c->pend_w = tn_xcalloc((size_t)c->nbufs + 1, 1);
  c->read_since = tn_xcalloc((size_t)c->nbufs + 1, 1);
  m->kernels = tn_xcalloc((size_t)(c->nroots ? c->nroots : 1), sizeof(cg_kernel_t));
  m->nkernels = c->nroots;
  for (int k = 0; k < c->nroots && !c->rc; k++)
    emit_kernel(c, k, &m->kernels[k], &kernels);
  if (c->nroots == 0) cg_fail(c, TN_EINVAL, "function %s computes nothing: no kernel to emit", c->f->name);
  tn_buf_printf(src, "/* Generated by tuned: target %s, entry %s, %d kernel%s. */\n",
                cg_target_name(c->d->target), c->entry, c->nroots, c->nroots == 1 ? "" : "s");
  if (c->d->target == CG_TARGET_CUDA && c->need_half) tn_buf_put(src, "#include <cuda_fp16.h>\n");
  if (c->d->target == CG_TARGET_CUDA && c->need_bf16) tn_buf_put(src, "#include <cuda_bf16.h>\n");
  if (c->d->target == CG_TARGET_CUDA && c->need_wmma) tn_buf_put(src, "#include <mma.h>\n");
  m->min_sm = c->need_hopper ? 90 : c->wmma_sm;
  m->sm90a = c->need_hopper;
  if (c->d->target == CG_TARGET_OPENCL && c->need_fp64)
    tn_buf_put(src, "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n");
  tn_buf_putc(src, '\n');
  emit_helpers(c, src);
  tn_buf_put(src, tn_buf_str(&kernels));
  tn_buf_free(&kernels);
}

/* ---- module ------------------------------------------------------------------------ */

static void fill_param(cg_param_t *p, const ir_buffer_t *b) {
  p->name = tn_xstrdup(b->name);
  p->dtype = b->dtype;
  p->ndim = b->ndim;
  for (int d = 0; d < b->ndim; d++) p->shape[d] = b->shape[d];
  p->role = b->role;
  p->elements = ir_buffer_numel(b);
}

/* The argument list as data, in the order of arg_list. */
static void fill_params(const cg_ctx_t *c, cg_module_t *m) {
  int n = c->f->nparams;
  for (int i = 0; i < c->nbufs; i++) n += is_workspace(&c->bufs[i]);
  m->params = tn_xcalloc((size_t)(n ? n : 1), sizeof(cg_param_t));
  for (int p = 0; p < c->f->nparams; p++) fill_param(&m->params[m->nparams++], c->f->params[p]);
  for (int i = 0; i < c->nbufs; i++) {
    const cg_buf_t *cb = &c->bufs[i];
    if (!is_workspace(cb)) continue;
    cg_param_t *p = &m->params[m->nparams++];
    fill_param(p, cb->b);
    if (!cb->packs) continue;
    p->elements = cg_buf_numel(cb);
    p->packs = tn_xstrdup(cb->packs->name);
    for (int k = 0; k < c->nroots; k++)
      if (c->pack_blk[k] && c->pack_blk[k]->writes[0].buf == cb->b) p->pack_fn = tn_xstrdup(c->pack_fn[k]);
  }
}

static void ctx_free(cg_ctx_t *c) {
  free(c->names);
  free(c->var_name);
  free(c->bufs);
  free(c->sites);
  free(c->xreds);
  free(c->pipes);
  free(c->stack);
  free(c->roots);
  free(c->pack_blk);
  free(c->pack_fn);
  free(c->pend_w);
  free(c->read_since);
  tn_buf_free(&c->shared);
  ir_bounds_free(&c->bounds);
  ir_func_free(c->scratch);
}

static int lower(const ir_func_t *f, cg_target_t target, int64_t static_shared_max, const char *entry,
                 cg_module_t **out, tn_err_t *err) {
  *out = NULL;
  const cg_dialect_t *d = cg_dialect_for(target);
  if (!f) return tn_err_set(err, TN_EINVAL, "cg_lower: no function given");
  if (!d) return tn_err_set(err, TN_EINVAL, "unknown target %d (valid: c, cuda, opencl)", (int)target);
  if (!entry) entry = CG_ENTRY_DEFAULT;
  if (!cg_entry_usable(entry))
    return tn_err_set(err, TN_EINVAL,
                      "entry name \"%s\" is not usable: it must be an identifier of at most %d "
                      "characters that is not a keyword, type or builtin of C, C++/CUDA or OpenCL C, a C "
                      "library function or macro (exit, sinf, errno, pipe), all capitals (a macro's style) or "
                      "led by '_'",
                      entry, CG_ENTRY_MAX);
  ir_func_t *own = d->gpu ? cg_inject_vthreads(f) : NULL;
  if (own) f = own;
  cg_ctx_t c = {.f = f, .d = d, .err = err, .entry = entry, .static_shared_max = static_shared_max};
  c.scratch = ir_func_new("codegen_scratch");
  c.scratch->next_var_id = f->next_var_id;
  ir_bounds_init(&c.bounds);
  tn_buf_init(&c.shared);
  cg_module_t *m = tn_xcalloc(1, sizeof *m);
  m->target = target;
  snprintf(m->entry, sizeof m->entry, "%s", entry);
  tn_buf_t src;
  tn_buf_init(&src);
  if (!cg_analyse(&c)) {
    if (d->gpu) emit_gpu(&c, m, &src);
    else emit_c(&c, m, &src);
  }
  if (!c.rc) fill_params(&c, m);
  int rc = c.rc;
  ctx_free(&c);
  ir_func_free(own);
  if (rc) {
    tn_buf_free(&src);
    cg_module_free(m);
    return rc;
  }
  m->source = tn_buf_take(&src);
  *out = m;
  return TN_OK;
}

int cg_lower(const ir_func_t *f, cg_target_t target, const char *entry, cg_module_t **out, tn_err_t *err) {
  return lower(f, target, CG_CUDA_STATIC_SHARED_DEFAULT, entry, out, err);
}

int cg_lower_for(const ir_func_t *f, const tn_target_t *t, const char *entry, cg_module_t **out, tn_err_t *err) {
  *out = NULL;
  if (!t) return tn_err_set(err, TN_EINVAL, "cg_lower_for: no target given");
  cg_target_t lang = t->kind == TN_TARGET_CUDA || t->kind == TN_TARGET_CUDA_HOST ? CG_TARGET_CUDA
                     : t->kind == TN_TARGET_OPENCL                                 ? CG_TARGET_OPENCL
                                                                                   : CG_TARGET_C;
  if (lang == CG_TARGET_CUDA && t->max_shared_memory_per_block <= 0)
    return tn_err_set(err, TN_EINVAL, "target %s gives no max_shared_memory_per_block (what static __shared__ arrays "
                      "may hold)", t->name);
  return lower(f, lang, t->max_shared_memory_per_block, entry, out, err);
}

void cg_module_free(cg_module_t *m) {
  if (!m) return;
  for (int i = 0; i < m->nparams; i++) {
    free(m->params[i].name);
    free(m->params[i].packs);
    free(m->params[i].pack_fn);
  }
  free(m->params);
  free(m->kernels);
  free(m->source);
  free(m);
}

/* ---- launch configuration ---------------------------------------------------------- */

static cJSON *int_triple(const int64_t v[3]) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < 3; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
  return a;
}

static const char *role_name(const cg_param_t *p) {
  return p->role == IR_BUF_INPUT ? "input" : p->role == IR_BUF_OUTPUT ? "output" : p->packs ? "packed" : "workspace";
}

static cJSON *tensor_maps_json(const cg_module_t *m, const cg_kernel_t *k) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < k->nmaps; i++) {
    const cg_tensor_map_t *t = &k->maps[i];
    cJSON *o = cJSON_CreateObject(), *dims = cJSON_CreateArray(), *box = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "name", t->name);
    cJSON_AddStringToObject(o, "param", t->param >= 0 && t->param < m->nparams ? m->params[t->param].name : "");
    for (int d = 0; d < 2; d++) {
      cJSON_AddItemToArray(dims, cJSON_CreateNumber((double)t->dims[d]));
      cJSON_AddItemToArray(box, cJSON_CreateNumber(t->box[d]));
    }
    cJSON_AddItemToObject(o, "dims", dims);
    cJSON_AddNumberToObject(o, "stride_bytes", (double)t->stride_bytes);
    cJSON_AddItemToObject(o, "box", box);
    cJSON_AddNumberToObject(o, "swizzle", t->swizzle);
    cJSON_AddItemToArray(a, o);
  }
  return a;
}

char *cg_module_launch_json(const cg_module_t *m) {
  cJSON *root = cJSON_CreateObject(), *ks = cJSON_CreateArray(), *ps = cJSON_CreateArray();
  if (!root || !ks || !ps) {
    cJSON_Delete(root);
    cJSON_Delete(ks);
    cJSON_Delete(ps);
    return NULL;
  }
  cJSON_AddStringToObject(root, "target", cg_target_name(m->target));
  cJSON_AddStringToObject(root, "entry", m->entry);
  for (int i = 0; i < m->nkernels; i++) {
    const cg_kernel_t *k = &m->kernels[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", k->name);
    cJSON_AddItemToObject(o, "grid", int_triple(k->grid));
    cJSON_AddItemToObject(o, "block", int_triple(k->block));
    cJSON_AddNumberToObject(o, "dyn_shared_bytes", (double)k->dyn_shared_bytes);
    cJSON_AddNumberToObject(o, "static_shared_bytes", (double)k->static_shared_bytes);
    if (k->nmaps) cJSON_AddItemToObject(o, "tensor_maps", tensor_maps_json(m, k));
    cJSON_AddItemToArray(ks, o);
  }
  for (int i = 0; i < m->nparams; i++) {
    const cg_param_t *p = &m->params[i];
    cJSON *o = cJSON_CreateObject(), *shape = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "name", p->name);
    cJSON_AddStringToObject(o, "dtype", ir_dtype_name(p->dtype));
    for (int d = 0; d < p->ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)p->shape[d]));
    cJSON_AddItemToObject(o, "shape", shape);
    cJSON_AddStringToObject(o, "role", role_name(p));
    cJSON_AddNumberToObject(o, "elements", (double)p->elements);
    if (p->packs) {
      cJSON_AddStringToObject(o, "packs", p->packs);
      cJSON_AddStringToObject(o, "pack_function", p->pack_fn ? p->pack_fn : "");
      char entry[sizeof m->entry + 16];
      snprintf(entry, sizeof entry, "tuned_pack_%s", m->entry);
      if (!cJSON_GetObjectItem(root, "pack_entry")) cJSON_AddStringToObject(root, "pack_entry", entry);
    }
    cJSON_AddItemToArray(ps, o);
  }
  cJSON_AddItemToObject(root, "kernels", ks);
  cJSON_AddItemToObject(root, "params", ps);
  char *s = cJSON_Print(root);
  cJSON_Delete(root);
  return s;
}
