/* test_codegen.c — the codegen suite: lowers every workload and hand-
 * scheduled IR to C, CUDA and OpenCL; builds and runs the C output (cc +
 * dlopen) and the OpenCL output (PoCL) against the reference evaluator,
 * compiles the CUDA output with NVRTC, and checks key lines of the source
 * and the launch configuration. */
#include "codegen/codegen.h"
#include "ir/intrin.h"
#include "measure/measure.h"
#include "schedule/schedule.h"
#include "testutil.h"
#include "wmma_sched.h"

#include <cJSON.h>
#include <dlfcn.h>
#include <float.h>
#include <ftw.h>
#include <glob.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if TUNED_HAVE_OPENCL
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#endif
#if TUNED_HAVE_CUDA && defined(HAVE_CUDA)
#include <nvrtc.h>
#define CG_TEST_NVRTC 1
#ifndef TUNED_CUDA_INCLUDE
#define TUNED_CUDA_INCLUDE "/usr/local/cuda/include"
#endif
#else
#define CG_TEST_NVRTC 0
#endif

#define SEED 7
#define MAX_DATA ((size_t)1 << 30)

/* ======================================================================
 * Workloads and IR building
 * ====================================================================== */

/* Loads workloads/<name> with "K=V,K=V" overrides. */
static ir_workload_t *load_wl(const char *name, const char *sets) {
  char path[512], buf[256];
  snprintf(path, sizeof path, "%s/workloads/%s", TUNED_SOURCE_ROOT, name);
  tn_arena_t *a = tn_arena_new();
  ir_param_set_t ov[16];
  int n = 0;
  tn_err_t err = {0};
  snprintf(buf, sizeof buf, "%s", sets ? sets : "");
  for (char *tok = strtok(buf, ","); tok && n < 16; tok = strtok(NULL, ","))
    ck_assert_int_eq(ir_param_set_parse(tok, a, &ov[n++], &err), 0);
  ir_workload_t *w = NULL;
  int rc = ir_workload_load(path, ov, n, &w, &err);
  tn_arena_free(a);
  ck_assert_msg(rc == 0, "%s: %s", name, err.msg);
  return w;
}

static ir_workload_t *text_wl(const char *text) {
  ir_workload_t *w = NULL;
  tn_err_t err = {0};
  ck_assert_msg(ir_workload_parse("t.tw", text, strlen(text), NULL, 0, &w, &err) == 0, "%s", err.msg);
  return w;
}

static ir_expr_t *V(ir_func_t *f, ir_var_t *v) { return ir_varref(f, v); }
static ir_expr_t *K(ir_func_t *f, int64_t c) { return ir_int(f, c); }
static ir_expr_t *add(ir_func_t *f, ir_expr_t *a, ir_expr_t *b) { return ir_bin(f, IR_E_ADD, a, b); }
static ir_expr_t *mul(ir_func_t *f, ir_expr_t *a, int64_t c) { return ir_bin(f, IR_E_MUL, a, K(f, c)); }
/* a * c + b */
static ir_expr_t *mad(ir_func_t *f, ir_var_t *a, int64_t c, ir_var_t *b) {
  return add(f, mul(f, V(f, a), c), V(f, b));
}

static ir_stmt_t *loop(ir_func_t *f, ir_var_t *v, int64_t ext, ir_loop_kind_t kind,
                       const char *thread, ir_stmt_t *body) {
  ir_stmt_t *s = ir_loop_new(f, v, ext, body);
  s->u.loop.kind = thread ? IR_LOOP_THREAD : kind;
  s->u.loop.tag = IR_TAG_NONE;
  ck_assert(!thread || ir_thread_tag_parse(thread, &s->u.loop.tag) == 0);
  return s;
}

static ir_stmt_t *seq2(ir_func_t *f, ir_stmt_t *a, ir_stmt_t *b) {
  ir_stmt_t *items[2] = {a, b};
  return ir_seq(f, items, 2);
}

/* A compute block: iterators (kinds "SSR"), bindings, init, body. */
static ir_stmt_t *block(ir_func_t *f, const char *name, int n, ir_var_t *const *vars,
                        const int64_t *ext, const char *kinds, ir_expr_t *const *bind,
                        ir_stmt_t *init, ir_stmt_t *body) {
  ir_stmt_t *s = ir_block_new(f, name);
  ir_block_t *b = &s->u.block;
  b->iters = TN_NEWN(f->arena, ir_iter_t, n);
  b->niters = n;
  for (int i = 0; i < n; i++)
    b->iters[i] = (ir_iter_t){vars[i], ext[i], kinds[i] == 'R' ? IR_ITER_REDUCE : IR_ITER_SPATIAL, bind[i]};
  b->init = init;
  b->body = body;
  ir_block_infer_regions(f, b);
  return s;
}

static ir_stmt_t *store2(ir_func_t *f, ir_buffer_t *b, ir_var_t *x, ir_var_t *y, ir_expr_t *v) {
  ir_expr_t *idx[2] = {V(f, x), V(f, y)};
  return ir_store(f, b, idx, 2, v);
}

static ir_expr_t *load2(ir_func_t *f, ir_buffer_t *b, ir_var_t *x, ir_var_t *y) {
  ir_expr_t *idx[2] = {V(f, x), V(f, y)};
  return ir_load(f, b, idx, 2);
}

static void set_root(ir_func_t *f, ir_stmt_t *body) { f->root->u.block.body = body; }

static void add_allocs(ir_func_t *f, ir_buffer_t *const *bufs, int n) {
  ir_block_t *r = &f->root->u.block;
  ir_buffer_t **all = TN_NEWN(f->arena, ir_buffer_t *, r->nallocs + n);
  memcpy(all, r->allocs, sizeof(*all) * (size_t)r->nallocs);
  memcpy(all + r->nallocs, bufs, sizeof(*all) * (size_t)n);
  r->allocs = all;
  r->nallocs += n;
}

static ir_stmt_t *root_item(ir_func_t *f, int i) {
  ir_stmt_t *b = f->root->u.block.body;
  return b->kind == IR_S_SEQ ? b->u.seq.items[i] : b;
}

static int root_count(ir_func_t *f) {
  ir_stmt_t *b = f->root->u.block.body;
  return b->kind == IR_S_SEQ ? b->u.seq.n : 1;
}

typedef struct subst_ctx {
  ir_func_t *f;
  ir_var_t *from;
  ir_expr_t *to, *pred;
} subst_ctx_t;

static bool subst_visit(ir_stmt_t *s, void *p) {
  subst_ctx_t *c = p;
  if (s->kind != IR_S_BLOCK) return true;
  ir_block_t *b = &s->u.block;
  for (int i = 0; i < b->niters; i++)
    b->iters[i].binding = ir_expr_subst(c->f, b->iters[i].binding, &c->from, &c->to, 1);
  if (b->predicate) b->predicate = ir_expr_subst(c->f, b->predicate, &c->from, &c->to, 1);
  if (c->pred) b->predicate = b->predicate ? ir_bin(c->f, IR_E_AND, b->predicate, c->pred) : c->pred;
  return false;
}

/* The outermost loop of every root statement split into blockIdx.x x
 * threadIdx.x (T threads, predicated when T does not divide it): the
 * simplest GPU binding, enough to run any workload on a GPU target. */
static ir_func_t *bind_outer(const ir_func_t *orig, int64_t T) {
  ir_func_t *f = ir_func_copy(orig);
  int n = root_count(f);
  ir_stmt_t **items = TN_NEWN(f->arena, ir_stmt_t *, n);
  for (int i = 0; i < n; i++) {
    ir_stmt_t *s = root_item(f, i);
    ck_assert_int_eq(s->kind, IR_S_LOOP);
    int64_t ext = s->u.loop.extent, t = ext < T ? ext : T, nb = (ext + t - 1) / t;
    ir_var_t *bx = ir_var_new(f, "bx", IR_INT32), *tx = ir_var_new(f, "tx", IR_INT32);
    ir_expr_t *fused = mad(f, bx, t, tx);
    subst_ctx_t c = {f, s->u.loop.var, fused,
                     nb * t == ext ? NULL : ir_bin(f, IR_E_LT, fused, K(f, ext))};
    ir_stmt_walk(s->u.loop.body, subst_visit, &c);
    items[i] = loop(f, bx, nb, 0, "blockIdx.x", loop(f, tx, t, 0, "threadIdx.x", s->u.loop.body));
  }
  set_root(f, n == 1 ? items[0] : ir_seq(f, items, n));
  return f;
}

/* ======================================================================
 * Running generated code
 * ====================================================================== */

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static void rm_tree(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static void write_file(const char *path, const char *text) {
  FILE *fp = fopen(path, "w");
  ck_assert_ptr_nonnull(fp);
  fputs(text, fp);
  fclose(fp);
}

static char *read_small(const char *path) {
  char *s = NULL;
  size_t n;
  if (tn_read_file(path, 1 << 20, &s, &n, NULL)) return tn_xstrdup("");
  return s;
}

static size_t host_bytes(ir_dtype_t t) { return (size_t)ir_dtype_bytes(t); }

/* Parameter arrays in their storage types. */
static void *to_host(ir_dtype_t t, const double *v, int64_t n) {
  void *p = tn_xcalloc((size_t)(n ? n : 1), host_bytes(t));
  for (int64_t i = 0; i < n; i++) switch (t) {
    case IR_FLOAT32: ((float *)p)[i] = (float)v[i]; break;
    case IR_FLOAT64: ((double *)p)[i] = v[i]; break;
    case IR_FLOAT16: ((uint16_t *)p)[i] = tn_float_to_half((float)v[i]); break;
    case IR_BFLOAT16: ((uint16_t *)p)[i] = tn_float_to_bf16((float)v[i]); break;
    case IR_INT32: ((int32_t *)p)[i] = v[i] != v[i] ? -7777 : (int32_t)v[i]; break;
    case IR_INT64: ((int64_t *)p)[i] = v[i] != v[i] ? -7777 : (int64_t)v[i]; break;
    case IR_BOOL: ((uint8_t *)p)[i] = v[i] != 0; break;
    }
  return p;
}

static void from_host(ir_dtype_t t, const void *p, double *v, int64_t n) {
  for (int64_t i = 0; i < n; i++) switch (t) {
    case IR_FLOAT32: v[i] = ((const float *)p)[i]; break;
    case IR_FLOAT64: v[i] = ((const double *)p)[i]; break;
    case IR_FLOAT16: v[i] = tn_half_to_float(((const uint16_t *)p)[i]); break;
    case IR_BFLOAT16: v[i] = tn_bf16_to_float(((const uint16_t *)p)[i]); break;
    case IR_INT32: v[i] = ((const int32_t *)p)[i]; break;
    case IR_INT64: v[i] = (double)((const int64_t *)p)[i]; break;
    case IR_BOOL: v[i] = ((const uint8_t *)p)[i]; break;
    }
}

/* Reference outputs of `ref` and inputs for `f` (the same parameters). */
static void make_data(const ir_func_t *f, const ir_func_t *ref, ir_data_t **d, ir_data_t **r) {
  tn_err_t err = {0};
  ck_assert_int_eq(ir_data_new(f, SEED, MAX_DATA, d, &err), 0);
  ck_assert_int_eq(ir_data_new(ref, SEED, MAX_DATA, r, &err), 0);
  ck_assert_msg(ir_eval(ref, *r, &err) == 0, "reference: %s", err.msg);
}

/* Every output within its dtype's tolerance of the reference. */
static void compare(const ir_func_t *f, const ir_data_t *got, const ir_data_t *ref, const char *what,
                    const char *src) {
  for (int i = 0; i < f->nparams; i++) {
    if (f->params[i]->role != IR_BUF_OUTPUT) continue;
    double e = ir_rel_l2_error(ref->vals[i], got->vals[i], got->sizes[i]);
    double tol = ir_dtype_tolerance(f->params[i]->dtype);
    ck_assert_msg(e <= tol, "%s: output %s error %g > %g (got[0]=%g ref[0]=%g)\n%s", what,
                  f->params[i]->name, e, tol, got->vals[i][0], ref->vals[i][0], src);
  }
}

static cg_module_t *lower_ok(const ir_func_t *f, cg_target_t t) {
  cg_module_t *m = NULL;
  tn_err_t err = {0};
  int rc = cg_lower(f, t, "kern", &m, &err);
  ck_assert_msg(rc == 0, "%s lowering failed: %s", cg_target_name(t), err.msg);
  ck_assert_ptr_nonnull(m->source);
  return m;
}

typedef int (*entry_fn)(void **);

/* Builds the C lowering of f, runs it and compares with ref's evaluation.
 * Returns the source (free it). */
/* Compiles a C module as the cc builder does and loads it. */
static void *load_c(const cg_module_t *m) {
  char dir[] = "/tmp/tuned-cg-XXXXXX", path[128], so[128], cmd[512], log[128];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/k.c", dir);
  snprintf(so, sizeof so, "%s/k.so", dir);
  snprintf(log, sizeof log, "%s/log", dir);
  write_file(path, m->source);
  /* -march=native as the cc builder: tensor intrinsics use the host's vector units */
  snprintf(cmd, sizeof cmd, "cc -O2 -march=native -fno-math-errno -fopenmp -shared -fPIC -o %s %s -lm > %s 2>&1", so, path, log);
  if (system(cmd) != 0) {
    char *l = read_small(log);
    ck_abort_msg("cc failed:\n%.3000s\n%.500s", l, m->source);
  }
  /* RTLD_NODELETE: dlclose must not unmap libgomp under its idle workers */
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  ck_assert_msg(h != NULL, "dlopen: %s", dlerror());
  rm_tree(dir); /* the library stays mapped */
  return h;
}

static char *check_c(const ir_func_t *f, const ir_func_t *ref) {
  cg_module_t *m = lower_ok(f, CG_TARGET_C);
  void *h = load_c(m);
  entry_fn fn = (entry_fn)dlsym(h, "tuned_entry_kern");
  ck_assert_ptr_nonnull(fn);
  ir_data_t *d, *r;
  make_data(f, ref, &d, &r);
  void **args = tn_xcalloc((size_t)m->nparams + 1, sizeof(void *));
  for (int i = 0; i < f->nparams; i++) args[i] = to_host(f->params[i]->dtype, d->vals[i], d->sizes[i]);
  /* packed copies of const inputs (hoisted packing): filled once, as a
   * user would, by the module's <entry>_pack_<input>, from poison */
  for (int i = f->nparams; i < m->nparams; i++) {
    const cg_param_t *p = &m->params[i];
    ck_assert_ptr_nonnull(p->packs);
    size_t bytes = (size_t)p->elements * (size_t)ir_dtype_bytes(p->dtype);
    args[i] = tn_xmalloc(bytes);
    memset(args[i], 0xFF, bytes);
    int src = -1;
    for (int q = 0; q < f->nparams; q++)
      if (!strcmp(f->params[q]->name, p->packs)) src = q;
    ck_assert_int_ge(src, 0);
    int (*pack)(const void *, void *) = (int (*)(const void *, void *))dlsym(h, p->pack_fn);
    ck_assert_msg(pack != NULL, "no %s in the module", p->pack_fn);
    ck_assert_int_eq(pack(args[src], args[i]), 0);
  }
  ck_assert_int_eq(fn(args), 0);
  for (int i = 0; i < m->nparams; i++) {
    if (i < f->nparams) from_host(f->params[i]->dtype, args[i], d->vals[i], d->sizes[i]);
    free(args[i]);
  }
  compare(f, d, r, "c", m->source);
  free(args);
  ir_data_free(d);
  ir_data_free(r);
  dlclose(h);
  char *src = tn_xstrdup(m->source);
  cg_module_free(m);
  return src;
}

#if TUNED_HAVE_OPENCL
#define CL_OK(call) ck_assert_int_eq((call), CL_SUCCESS)

static char pocl_cache[64];
/* The OpenCL C version programs are built for (the OpenCL builder's default is 1.2's). */
static const char *cl_std = "-cl-std=CL1.2";

static void pocl_cache_remove(void) { rm_tree(pocl_cache); }

/* PoCL's kernel cache in a private directory, removed when the (forked)
 * test process exits. */
static void opencl_setup(void) {
  if (pocl_cache[0]) return;
  snprintf(pocl_cache, sizeof pocl_cache, "/tmp/tuned-pocl-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(pocl_cache));
  setenv("POCL_CACHE_DIR", pocl_cache, 1);
  atexit(pocl_cache_remove);
}

/* Runs every kernel of the OpenCL lowering in order (global size grid *
 * block, local size block) and compares with ref's evaluation. */
static void run_opencl(const ir_func_t *f, const ir_func_t *ref, const cg_module_t *m) {
  opencl_setup();
  cl_platform_id plat;
  cl_device_id dev;
  cl_int e;
  cl_uint nplat = 0;
  if (clGetPlatformIDs(1, &plat, &nplat) != CL_SUCCESS || nplat == 0) {
    fprintf(stderr, "test_codegen: no OpenCL platform; OpenCL kernels not run\n");
    return;
  }
  CL_OK(clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
  cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
  CL_OK(e);
  cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &e);
  CL_OK(e);
  const char *src = m->source;
  cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &e);
  CL_OK(e);
  if (clBuildProgram(prog, 1, &dev, cl_std, NULL, NULL) != CL_SUCCESS) {
    static char blog[65536];
    clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, sizeof blog, blog, NULL);
    ck_abort_msg("OpenCL build (%s) failed:\n%.3000s\n%.500s", cl_std, blog, src);
  }
  ir_data_t *d, *r;
  make_data(f, ref, &d, &r);
  cl_mem *mem = tn_xcalloc((size_t)m->nparams, sizeof(cl_mem));
  void **host = tn_xcalloc((size_t)m->nparams, sizeof(void *));
  for (int i = 0; i < m->nparams; i++) {
    int64_t n = 1;
    for (int k = 0; k < m->params[i].ndim; k++) n *= m->params[i].shape[k];
    size_t bytes = (size_t)n * host_bytes(m->params[i].dtype);
    if (i < f->nparams) host[i] = to_host(m->params[i].dtype, d->vals[i], d->sizes[i]);
    mem[i] = clCreateBuffer(ctx, CL_MEM_READ_WRITE | (host[i] ? CL_MEM_COPY_HOST_PTR : 0), bytes,
                            host[i], &e);
    CL_OK(e);
  }
  for (int k = 0; k < m->nkernels; k++) {
    cl_kernel kern = clCreateKernel(prog, m->kernels[k].name, &e);
    CL_OK(e);
    for (int i = 0; i < m->nparams; i++) CL_OK(clSetKernelArg(kern, (cl_uint)i, sizeof(cl_mem), &mem[i]));
    size_t global[3], local[3];
    for (int a = 0; a < 3; a++) {
      local[a] = (size_t)m->kernels[k].block[a];
      global[a] = (size_t)(m->kernels[k].grid[a] * m->kernels[k].block[a]);
    }
    CL_OK(clEnqueueNDRangeKernel(q, kern, 3, NULL, global, local, 0, NULL, NULL));
    CL_OK(clFinish(q));
    clReleaseKernel(kern);
  }
  for (int i = 0; i < f->nparams; i++) {
    CL_OK(clEnqueueReadBuffer(q, mem[i], CL_TRUE, 0, (size_t)d->sizes[i] * host_bytes(f->params[i]->dtype),
                              host[i], 0, NULL, NULL));
    from_host(f->params[i]->dtype, host[i], d->vals[i], d->sizes[i]);
  }
  compare(f, d, r, "opencl", src);
  for (int i = 0; i < m->nparams; i++) {
    clReleaseMemObject(mem[i]);
    free(host[i]);
  }
  free(mem);
  free(host);
  ir_data_free(d);
  ir_data_free(r);
  clReleaseProgram(prog);
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
}
#endif

#if CG_TEST_NVRTC
/* The PTX of src for arch (malloc'ed); a failed compile fails the test. */
static char *nvrtc_ptx(const char *src, const char *arch) {
  nvrtcProgram p;
  ck_assert_int_eq(nvrtcCreateProgram(&p, src, "kern.cu", 0, NULL, NULL), NVRTC_SUCCESS);
  char opt[64];
  snprintf(opt, sizeof opt, "--gpu-architecture=%s", arch);
  const char *opts[] = {opt, "-I" TUNED_CUDA_INCLUDE};
  ck_assert_int_eq(nvrtcCompileProgram(p, 2, opts), NVRTC_SUCCESS);
  size_t n = 0;
  ck_assert_int_eq(nvrtcGetPTXSize(p, &n), NVRTC_SUCCESS);
  char *ptx = tn_xcalloc(n + 1, 1);
  ck_assert_int_eq(nvrtcGetPTX(p, ptx), NVRTC_SUCCESS);
  nvrtcDestroyProgram(&p);
  return ptx;
}

static void nvrtc_compile(const char *src, const char *arch) {
  nvrtcProgram p;
  ck_assert_int_eq(nvrtcCreateProgram(&p, src, "kern.cu", 0, NULL, NULL), NVRTC_SUCCESS);
  char opt[64];
  snprintf(opt, sizeof opt, "--gpu-architecture=%s", arch);
  const char *opts[] = {opt, "-I" TUNED_CUDA_INCLUDE};
  nvrtcResult rc = nvrtcCompileProgram(p, 2, opts);
  if (rc != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(p, &n);
    char *log = tn_xcalloc(n + 1, 1);
    nvrtcGetProgramLog(p, log);
    ck_abort_msg("NVRTC (%s) failed: %s\n%.3000s\n%.500s", arch, nvrtcGetErrorString(rc), log, src);
  }
  nvrtcDestroyProgram(&p);
}
#endif

typedef struct gpu_out {
  char *cuda, *opencl; /* sources */
  char *cuda_json;     /* launch configuration */
} gpu_out_t;

/* CUDA: lowers and compiles for sm_75 and sm_90.  OpenCL: lowers, runs on
 * PoCL and compares with ref's evaluation. */
/* The cuda-host run of m (one checked run and one timed: the times mean
 * nothing here): its result. */
static ms_result_t run_cuda_host_result(const ir_func_t *ref, const cg_module_t *m) {
  tn_target_t t;
  tn_err_t err = {0};
  ck_assert_msg(tn_target_lookup("cuda-host", NULL, &t, &err) == TN_OK, "%s", err.msg);
  ms_options_t o = {.seed = 1};
  o.run.min_secs = 1e-9;
  o.run.min_repeats = o.run.max_repeats = 1;
  ms_result_t r;
  ck_assert_msg(ms_measure(ref, &t, (cg_module_t *const *)&m, 1, &o, &r, &err) == TN_OK, "%s", err.msg);
  return r;
}

/* Runs the CUDA lowering through the cuda-host harness (the C++ compiler,
 * the worker, verification against ref's evaluation). */
static void run_cuda_host(const ir_func_t *ref, const cg_module_t *m) {
  ms_result_t r = run_cuda_host_result(ref, m);
  ck_assert_msg(r.status == MS_OK, "cuda-host: %s: %.2000s\n%.2000s", ms_status_name(r.status), r.error, m->source);
  ms_result_clear(&r);
}

static gpu_out_t check_gpu(const ir_func_t *f, const ir_func_t *ref) {
  gpu_out_t o;
  cg_module_t *mc = lower_ok(f, CG_TARGET_CUDA);
#if CG_TEST_NVRTC
  nvrtc_compile(mc->source, "sm_75");
  nvrtc_compile(mc->source, "sm_90");
#endif
  run_cuda_host(ref, mc);
  o.cuda = tn_xstrdup(mc->source);
  o.cuda_json = cg_module_launch_json(mc);
  cg_module_free(mc);
  cg_module_t *mo = lower_ok(f, CG_TARGET_OPENCL);
#if TUNED_HAVE_OPENCL
  run_opencl(f, ref, mo);
#else
  (void)ref;
#endif
  o.opencl = tn_xstrdup(mo->source);
  cg_module_free(mo);
  return o;
}

static void gpu_out_free(gpu_out_t *o) {
  free(o->cuda);
  free(o->opencl);
  free(o->cuda_json);
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

#define HAS(src, text) ck_assert_msg(strstr((src), (text)) != NULL, "missing \"%s\" in:\n%.3000s", (text), (src))
#define LACKS(src, text) ck_assert_msg(strstr((src), (text)) == NULL, "unexpected \"%s\" in:\n%s", (text), (src))
/* Both texts are in src, a first. */
#define BEFORE(src, a, b)                                                                       \
  ck_assert_msg(strstr((src), (a)) && strstr((src), (b)) && strstr((src), (a)) < strstr((src), (b)), \
                "expected \"%s\" before \"%s\" in:\n%s", (a), (b), (src))

/* ======================================================================
 * Hand-made schedules
 * ====================================================================== */

/* matmul 64x64x64: 16x16 tiles per thread block (blockIdx.y/x), 4x4 threads
 * (threadIdx.y/x) each accumulating a 4x4 tile in C_local, k in steps of 8
 * with A/B tiles fetched into shared memory cooperatively with float4. */
static ir_func_t *sched_matmul_gpu(const ir_func_t *orig) {
  ir_func_t *f = ir_func_copy(orig);
  ir_buffer_t *A = f->params[0], *B = f->params[1], *C = f->params[2];
  int64_t shape[2] = {64, 64};
  ir_buffer_t *As = ir_buffer_new(f, "A_shared", IR_FLOAT32, 2, shape, IR_SCOPE_SHARED, IR_BUF_TEMP);
  ir_buffer_t *Bs = ir_buffer_new(f, "B_shared", IR_FLOAT32, 2, shape, IR_SCOPE_SHARED, IR_BUF_TEMP);
  ir_buffer_t *Cl = ir_buffer_new(f, "C_local", IR_FLOAT32, 2, shape, IR_SCOPE_LOCAL, IR_BUF_TEMP);
  ir_buffer_t *bufs[3] = {As, Bs, Cl};
  add_allocs(f, bufs, 3);
  const char *names[] = {"i_0", "j_0", "i_1", "j_1", "k_0", "k_1", "i_2", "j_2", "ax0", "ax1",
                         "ax2", "ax3", "ax0", "ax1", "ax2", "ax3", "ax0", "ax1"};
  ir_var_t *l[18];
  for (int i = 0; i < 18; i++) l[i] = ir_var_new(f, names[i], IR_INT32);
  ir_var_t *i0 = l[0], *j0 = l[1], *i1 = l[2], *j1 = l[3], *k0 = l[4], *k1 = l[5], *i2 = l[6], *j2 = l[7];
  int64_t ext3[3] = {64, 64, 64};

  /* C_local[vi, vj] += A_shared[vi, vk] * B_shared[vk, vj] */
  ir_var_t *cv[3] = {ir_var_new(f, "v_i", IR_INT32), ir_var_new(f, "v_j", IR_INT32), ir_var_new(f, "v_k", IR_INT32)};
  ir_expr_t *cb[3] = {add(f, mul(f, V(f, i0), 16), mad(f, i1, 4, i2)),
                      add(f, mul(f, V(f, j0), 16), mad(f, j1, 4, j2)), mad(f, k0, 8, k1)};
  ir_stmt_t *cinit = store2(f, Cl, cv[0], cv[1], ir_float(f, IR_FLOAT32, 0));
  ir_expr_t *prod = ir_bin(f, IR_E_MUL, load2(f, As, cv[0], cv[2]), load2(f, Bs, cv[2], cv[1]));
  ir_stmt_t *cbody = store2(f, Cl, cv[0], cv[1], add(f, load2(f, Cl, cv[0], cv[1]), prod));
  ir_stmt_t *cblk = block(f, "C_local", 3, cv, ext3, "SSR", cb, cinit, cbody);

  /* cooperative fetches: 128 elements by 16 threads x float4, two rounds */
  ir_stmt_t *fetch[2];
  for (int t = 0; t < 2; t++) {
    ir_var_t **a = &l[8 + 4 * t];
    ir_var_t *fv[2] = {ir_var_new(f, "v0", IR_INT32), ir_var_new(f, "v1", IR_INT32)};
    ir_expr_t *fused = add(f, add(f, mul(f, V(f, a[0]), 64), mul(f, V(f, a[1]), 16)), mad(f, a[2], 4, a[3]));
    int64_t cols = t == 0 ? 8 : 16;
    ir_expr_t *row = ir_bin(f, IR_E_FLOORDIV, fused, K(f, cols));
    ir_expr_t *col = ir_bin(f, IR_E_FLOORMOD, fused, K(f, cols));
    ir_expr_t *fb[2];
    if (t == 0) {
      fb[0] = add(f, mul(f, V(f, i0), 16), row);
      fb[1] = add(f, mul(f, V(f, k0), 8), col);
    } else {
      fb[0] = add(f, mul(f, V(f, k0), 8), row);
      fb[1] = add(f, mul(f, V(f, j0), 16), col);
    }
    ir_buffer_t *dst = t == 0 ? As : Bs, *srcb = t == 0 ? A : B;
    ir_stmt_t *fblk = block(f, t == 0 ? "A_shared" : "B_shared", 2, fv, ext3, "SS", fb, NULL,
                            store2(f, dst, fv[0], fv[1], load2(f, srcb, fv[0], fv[1])));
    fetch[t] = loop(f, a[0], 2, IR_LOOP_SERIAL, NULL,
                    loop(f, a[1], 4, 0, "threadIdx.y",
                         loop(f, a[2], 4, 0, "threadIdx.x", loop(f, a[3], 4, IR_LOOP_VECTORIZED, NULL, fblk))));
  }
  ir_stmt_t *compute = loop(f, k1, 8, IR_LOOP_SERIAL, NULL,
                            loop(f, i2, 4, IR_LOOP_UNROLLED, NULL, loop(f, j2, 4, IR_LOOP_UNROLLED, NULL, cblk)));
  ir_stmt_t *items[3] = {fetch[0], fetch[1], compute};
  ir_stmt_t *kloop = loop(f, k0, 8, IR_LOOP_SERIAL, NULL, ir_seq(f, items, 3));

  /* write back C_local -> C */
  ir_var_t *wv[2] = {ir_var_new(f, "v0", IR_INT32), ir_var_new(f, "v1", IR_INT32)};
  ir_expr_t *wb[2] = {add(f, mul(f, V(f, i0), 16), mad(f, i1, 4, l[16])),
                      add(f, mul(f, V(f, j0), 16), mad(f, j1, 4, l[17]))};
  ir_stmt_t *wblk = block(f, "C", 2, wv, ext3, "SS", wb, NULL, store2(f, C, wv[0], wv[1], load2(f, Cl, wv[0], wv[1])));
  ir_stmt_t *wloop = loop(f, l[16], 4, IR_LOOP_SERIAL, NULL, loop(f, l[17], 4, IR_LOOP_SERIAL, NULL, wblk));

  set_root(f, loop(f, i0, 4, 0, "blockIdx.y",
                   loop(f, j0, 4, 0, "blockIdx.x",
                        loop(f, i1, 4, 0, "threadIdx.y", loop(f, j1, 4, 0, "threadIdx.x", seq2(f, kloop, wloop))))));
  return f;
}

/* matmul on a CPU: i_0 parallel (M/8 rows each), C_local 8x16 accumulator
 * per (i_0, j_0) tile with j vectorized and i unrolled, written back. */
static ir_func_t *sched_matmul_cpu(const ir_func_t *orig, int64_t M, int64_t N, int64_t Kd) {
  ir_func_t *f = ir_func_copy(orig);
  ir_buffer_t *A = f->params[0], *B = f->params[1], *C = f->params[2];
  int64_t shape[2] = {M, N};
  ir_buffer_t *Cl = ir_buffer_new(f, "C_local", IR_FLOAT32, 2, shape, IR_SCOPE_LOCAL, IR_BUF_TEMP);
  add_allocs(f, &Cl, 1);
  ir_var_t *i0 = ir_var_new(f, "i_0", IR_INT32), *j0 = ir_var_new(f, "j_0", IR_INT32),
           *k = ir_var_new(f, "k", IR_INT32), *i1 = ir_var_new(f, "i_1", IR_INT32),
           *j1 = ir_var_new(f, "j_1", IR_INT32), *a0 = ir_var_new(f, "ax0", IR_INT32),
           *a1 = ir_var_new(f, "ax1", IR_INT32);
  ir_var_t *cv[3] = {ir_var_new(f, "v_i", IR_INT32), ir_var_new(f, "v_j", IR_INT32), ir_var_new(f, "v_k", IR_INT32)};
  int64_t ext[3] = {M, N, Kd};
  ir_expr_t *cb[3] = {mad(f, i0, 8, i1), mad(f, j0, 16, j1), V(f, k)};
  ir_stmt_t *cinit = store2(f, Cl, cv[0], cv[1], ir_float(f, IR_FLOAT32, 0));
  ir_expr_t *prod = ir_bin(f, IR_E_MUL, load2(f, A, cv[0], cv[2]), load2(f, B, cv[2], cv[1]));
  ir_stmt_t *cblk = block(f, "C_local", 3, cv, ext, "SSR", cb, cinit,
                          store2(f, Cl, cv[0], cv[1], add(f, load2(f, Cl, cv[0], cv[1]), prod)));
  ir_var_t *wv[2] = {ir_var_new(f, "v0", IR_INT32), ir_var_new(f, "v1", IR_INT32)};
  ir_expr_t *wb[2] = {mad(f, i0, 8, a0), mad(f, j0, 16, a1)};
  ir_stmt_t *wblk = block(f, "C", 2, wv, ext, "SS", wb, NULL, store2(f, C, wv[0], wv[1], load2(f, Cl, wv[0], wv[1])));
  ir_stmt_t *upd = loop(f, k, Kd, IR_LOOP_SERIAL, NULL,
                        loop(f, i1, 8, IR_LOOP_UNROLLED, NULL, loop(f, j1, 16, IR_LOOP_VECTORIZED, NULL, cblk)));
  ir_stmt_t *wr = loop(f, a0, 8, IR_LOOP_SERIAL, NULL, loop(f, a1, 16, IR_LOOP_VECTORIZED, NULL, wblk));
  ir_stmt_t *outer = loop(f, i0, M / 8, IR_LOOP_PARALLEL, NULL, loop(f, j0, N / 16, IR_LOOP_SERIAL, NULL, seq2(f, upd, wr)));
  ir_annot_set_int(f, &outer->u.loop.annots, &outer->u.loop.nannots, "pragma_auto_unroll_max_step", 16);
  set_root(f, outer);
  return f;
}

/* square 256x160 through a copy of A (of the given scope): per i_0 (2
 * iterations of kind `outer`) 128x160 floats (80 KiB: too big for the
 * stack), or with outer < 0 the whole 256x160 at the top. */
static ir_func_t *sched_square_cache(const ir_func_t *orig, int outer, ir_scope_t scope) {
  ir_func_t *f = ir_func_copy(orig);
  ir_buffer_t *A = f->params[0], *B = f->params[1];
  int64_t shape[2] = {256, 160}, rows = outer >= 0 ? 128 : 256;
  ir_buffer_t *Al = ir_buffer_new(f, "A_local", IR_FLOAT32, 2, shape, scope, IR_BUF_TEMP);
  add_allocs(f, &Al, 1);
  ir_var_t *i0 = ir_var_new(f, "i_0", IR_INT32), *a0 = ir_var_new(f, "ax0", IR_INT32),
           *a1 = ir_var_new(f, "ax1", IR_INT32), *i1 = ir_var_new(f, "i_1", IR_INT32),
           *j = ir_var_new(f, "j", IR_INT32);
  ir_var_t *cv[2] = {ir_var_new(f, "v0", IR_INT32), ir_var_new(f, "v1", IR_INT32)};
  ir_var_t *bv[2] = {ir_var_new(f, "v_i", IR_INT32), ir_var_new(f, "v_j", IR_INT32)};
  ir_expr_t *cb[2] = {outer >= 0 ? mad(f, i0, 128, a0) : V(f, a0), V(f, a1)};
  ir_expr_t *bb[2] = {outer >= 0 ? mad(f, i0, 128, i1) : V(f, i1), V(f, j)};
  ir_stmt_t *copy = block(f, "A_local", 2, cv, shape, "SS", cb, NULL,
                          store2(f, Al, cv[0], cv[1], load2(f, A, cv[0], cv[1])));
  ir_expr_t *sq = ir_bin(f, IR_E_MUL, load2(f, Al, bv[0], bv[1]), load2(f, Al, bv[0], bv[1]));
  ir_stmt_t *comp = block(f, "B", 2, bv, shape, "SS", bb, NULL, store2(f, B, bv[0], bv[1], sq));
  ir_stmt_t *body = seq2(f, loop(f, a0, rows, 0, NULL, loop(f, a1, 160, 0, NULL, copy)),
                         loop(f, i1, rows, 0, NULL, loop(f, j, 160, 0, NULL, comp)));
  set_root(f, outer >= 0 ? loop(f, i0, 2, (ir_loop_kind_t)outer, NULL, body) : body);
  return f;
}

/* Rows on blockIdx (optionally `ty` rows per block on threadIdx.y), the
 * reduction over j split j_0 (serial) x j_1 (threadIdx.x, T) with a
 * predicate when T does not divide N.  Works for any 2-D block (v_i, v_j)
 * whose loops are the first two of its root statement. */
static ir_stmt_t *row_nest(ir_func_t *f, ir_stmt_t *blk, ir_var_t *row, int64_t N, int64_t T) {
  ir_block_t *b = &blk->u.block;
  ir_var_t *j0 = ir_var_new(f, "j_0", IR_INT32), *j1 = ir_var_new(f, "j_1", IR_INT32);
  int64_t nj = (N + T - 1) / T;
  b->iters[0].binding = V(f, row);
  b->iters[1].binding = mad(f, j0, T, j1);
  b->predicate = nj * T == N ? NULL : ir_bin(f, IR_E_LT, mad(f, j0, T, j1), K(f, N));
  return loop(f, j0, nj, IR_LOOP_SERIAL, NULL, loop(f, j1, T, 0, "threadIdx.x", blk));
}

static ir_func_t *sched_rows(const ir_func_t *orig, int64_t M, int64_t N, int64_t T, int64_t ty) {
  ir_func_t *f = ir_func_copy(orig);
  ir_var_t *i0 = ir_var_new(f, "i_0", IR_INT32), *i1 = ir_var_new(f, "i_1", IR_INT32);
  ir_var_t *row = ir_var_new(f, "r", IR_INT32);
  int n = root_count(f);
  ir_stmt_t **items = TN_NEWN(f->arena, ir_stmt_t *, n);
  for (int k = 0; k < n; k++) {
    ir_stmt_t *s = root_item(f, k);
    ir_stmt_t *blk = s->u.loop.body->u.loop.body; /* i -> j -> block */
    ck_assert_int_eq(blk->kind, IR_S_BLOCK);
    items[k] = row_nest(f, blk, row, N, T);
  }
  ir_stmt_t *body = n == 1 ? items[0] : ir_seq(f, items, n);
  /* r = i_0 * ty + i_1 through a unit block would be clumsy: bind row loops directly */
  if (ty == 1) {
    row->name = "i";
    set_root(f, loop(f, row, M, 0, "blockIdx.x", body));
  } else {
    subst_ctx_t c = {f, row, mad(f, i0, ty, i1), NULL};
    ir_stmt_walk(body, subst_visit, &c);
    set_root(f, loop(f, i0, M / ty, 0, "blockIdx.x", loop(f, i1, ty, 0, "threadIdx.y", body)));
  }
  return f;
}

/* ======================================================================
 * Tests: C target
 * ====================================================================== */

static const struct {
  const char *file, *sets;
} small[] = {
    {"vector_add.tw", "N=100"},
    {"square.tw", "M=9,N=13"},
    {"window_sum.tw", "N=50"},
    {"matmul.tw", "M=12,N=10,K=7"},
    {"matmul_bt.tw", "M=8,N=6,K=5"},
    {"batch_matmul.tw", "BATCH=2,M=5,N=6,K=7"},
    {"row_sum.tw", "M=5,N=33"},
    {"softmax.tw", "M=4,N=19"},
    {"dense_bias_relu.tw", "B=2,IN=17,OUT=9"},
    {"conv2d.tw", "N=1,C=3,H=6,W=5,F=2"},
};

START_TEST(test_c_workloads) {
  ir_workload_t *w = load_wl(small[_i].file, small[_i].sets);
  char *src = check_c(w->func, w->func);
  HAS(src, "int kern(");
  HAS(src, "int tuned_entry_kern(void **args) {");
  free(src);
  ir_workload_free(w);
}
END_TEST

START_TEST(test_c_source_shape) {
  ir_workload_t *w = load_wl("matmul.tw", "M=8,N=8,K=8");
  cg_module_t *m = lower_ok(w->func, CG_TARGET_C);
  HAS(m->source, "int kern(float *restrict A, float *restrict B, float *restrict C) {");
  HAS(m->source, "for (int k = 0; k < 8; ++k) {");
  HAS(m->source, "if (v_k == 0) {");
  HAS(m->source, "C[v_i * 8 + v_j] = C[v_i * 8 + v_j] + A[v_i * 8 + v_k] * B[v_k * 8 + v_j];");
  HAS(m->source, "return kern((float *)args[0], (float *)args[1], (float *)args[2]);");
  ck_assert_int_eq(m->nkernels, 1);
  ck_assert_int_eq(m->nparams, 3);
  ck_assert_str_eq(m->params[2].name, "C");
  ck_assert_int_eq(m->params[2].role, IR_BUF_OUTPUT);
  cg_module_free(m);
  /* softmax: temps on the heap, freed; distinct loop names per nest */
  ir_workload_t *s = load_wl("softmax.tw", "M=4,N=8");
  m = lower_ok(s->func, CG_TARGET_C);
  HAS(m->source, "float *rmax = (float *)malloc(sizeof(float) * 4);");
  HAS(m->source, "free(E);");
  HAS(m->source, "for (int i_3 = 0; i_3 < 4; ++i_3) {");
  HAS(m->source, "rmax[v_i] = tuned_fmaxf(rmax[v_i], A[v_i * 8 + v_j]);");
  HAS(m->source, "expf(");
  ck_assert_int_eq(m->nparams, 2); /* temps are not arguments on the C target */
  cg_module_free(m);
  /* more than 2^31 elements: 64-bit offsets */
  ir_workload_t *big = text_wl("param M = 70000, N = 40000\ninput A: float32[M, N]\noutput B: float32[M, N]\n"
                               "B[i, j] = A[i, j] * 2.0\n");
  m = lower_ok(big->func, CG_TARGET_C);
  HAS(m->source, "B[(int64_t)v_i * 40000LL + (int64_t)v_j] = A[(int64_t)v_i * 40000LL + (int64_t)v_j] * 2.0f;");
  cg_module_free(m);
  ir_workload_free(big);
  ir_workload_free(s);
  ir_workload_free(w);
}
END_TEST

START_TEST(test_c_dtypes) {
  const char *progs[] = {
      "param N = 37\ninput A: float16[N]\ninput B: float16[N]\noutput C: float16[N]\n"
      "C[i] = A[i] * B[i] + 1.0\n",
      "param N = 41\ninput A: int32[N]\ninput B: int32[N]\noutput C: int32[N]\n"
      "C[i] = A[i] / 3 + B[i] % 5 + max(A[i], 2) * min(B[i], 4) - (A[i] - 5) // 4\n",
      "param N = 23\ninput A: float64[N]\noutput C: float64[N]\n"
      "C[i] = sqrt(abs(A[i])) + pow(A[i], 2.0) + tanh(A[i]) + exp(A[i]) + log(abs(A[i]) + 1.0)\n",
      "param N = 19\ninput A: int64[N]\noutput C: int64[N]\noutput D: float32[N]\n"
      "C[i] = A[i] * A[i] - A[i] // 3\nD[i] = select(A[i] > 0, float32(A[i]) * 0.5, -1.0)\n",
      "param M = 6, N = 7\ninput A: float16[M, N]\noutput R: float16[M]\n"
      "R[i] = max(j < N: A[i, j] * 2.0)\n",
      /* bfloat16 with a float32 accumulator, and bfloat16 mixed with float16 (float32) */
      "param M = 5, N = 9\ninput A: bfloat16[M, N]\ninput H: float16[M, N]\ntemp S: float32[M]\n"
      "output R: bfloat16[M]\noutput D: float32[M, N]\n"
      "S[i] = sum(j < N: float32(A[i, j]) * 3.0)\nR[i] = bfloat16(S[i])\nD[i, j] = A[i, j] * H[i, j]\n",
  };
  for (size_t k = 0; k < TN_ARRAY_LEN(progs); k++) {
    ir_workload_t *w = text_wl(progs[k]);
    char *src = check_c(w->func, w->func);
    if (k == 5) {
      HAS(src, "uint16_t *restrict A, uint16_t *restrict H");
      HAS(src, "R[v_i_1] = tuned_f2bf((float)S[v_i_1]);");
      HAS(src, "D[v_i_2 * 9 + v_j_1] = (float)tuned_bf2f(A[v_i_2 * 9 + v_j_1]) * (float)tuned_h2f(H[v_i_2 * 9 + v_j_1]);");
    }
    if (k == 0) {
      HAS(src, "int kern(uint16_t *restrict A, uint16_t *restrict B, uint16_t *restrict C)");
      HAS(src, "tuned_f2h(tuned_h2f(A[v_i]) * tuned_h2f(B[v_i]) + 1.0f)");
    }
    if (k == 1) HAS(src, "tuned_floordiv_i32(");
    if (k == 2) HAS(src, "sqrt(fabs(A[v_i]))");
    free(src);
    ir_workload_free(w);
  }
}
END_TEST

START_TEST(test_c_matmul_local) {
  ir_workload_t *w = load_wl("matmul.tw", "M=32,N=48,K=20");
  ir_func_t *f = sched_matmul_cpu(w->func, 32, 48, 20);
  char *src = check_c(f, w->func);
  HAS(src, "#pragma omp parallel for num_threads(tuned_team())\n");
  HAS(src, "#pragma omp simd\n");
  HAS(src, "#pragma GCC unroll 8\n");
  HAS(src, "float C_local[128];"); /* 8 x 16 tile, not 32 x 48 */
  HAS(src, "C_local[i_1 * 16 + j_1] = C_local[i_1 * 16 + j_1] + A[v_i * 20 + v_k] * B[v_k * 48 + v_j];");
  free(src);
  ir_func_free(f);
  ir_workload_free(w);
}
END_TEST

/* A parallel loop's team leaves the cores other tasks keep busy to them
 * (tuned_team): with more spinning threads than cores beside it, the kernel
 * runs on one thread; TUNED_THREADS=fixed keeps OpenMP's team.  The
 * module's source, with a main that spins those threads, is built and run
 * as a program. */
START_TEST(test_c_team_leaves_busy_cores) {
  ir_workload_t *w = load_wl("matmul.tw", "M=32,N=48,K=20");
  ir_func_t *f = sched_matmul_cpu(w->func, 32, 48, 20);
  cg_module_t *m = lower_ok(f, CG_TARGET_C);
  HAS(m->source, "#pragma omp parallel for num_threads(tuned_team())\n");
  HAS(m->source, " */\n#ifndef _GNU_SOURCE\n#define _GNU_SOURCE\n#endif\n#include <math.h>");
  static const char driver[] =
      "#include <pthread.h>\n#include <stdio.h>\n"
      "static volatile int stop;\n"
      "static void *spin(void *p) { (void)p; while (!stop) {} return NULL; }\n"
      "int main(void) {\n"
      "  struct timespec ms = {0, 5000000};\n"
      "  printf(\"max %d quiet %d\\n\", omp_get_max_threads(), tuned_team());\n"
      "  int n = omp_get_num_procs() + 2;\n"
      "  pthread_t t[n];\n"
      "  for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, spin, NULL);\n"
      "  nanosleep(&ms, NULL);\n"
      "  int a = tuned_team();\n"
      "  nanosleep(&ms, NULL);\n"
      "  int b = tuned_team();\n"
      "  stop = 1;\n"
      "  for (int i = 0; i < n; i++) pthread_join(t[i], NULL);\n"
      "  printf(\"busy %d %d\\n\", a, b);\n"
      "  return 0;\n"
      "}\n";
  char dir[] = "/tmp/tuned-team-XXXXXX", path[96], exe[96], cmd[512];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/k.c", dir);
  snprintf(exe, sizeof exe, "%s/k", dir);
  char *text = tn_xmalloc(strlen(m->source) + sizeof driver + 1);
  sprintf(text, "%s%s", m->source, driver);
  write_file(path, text);
  free(text);
  snprintf(cmd, sizeof cmd, "cc -O1 -fopenmp -pthread -o %s %s -lm 2>%s/log", exe, path, dir);
  ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
  for (int fixed = 0; fixed < 2; fixed++) {
    snprintf(cmd, sizeof cmd, "%s%s", fixed ? "TUNED_THREADS=fixed " : "", exe);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    int most = 0, quiet = 0, a = 0, b = 0;
    ck_assert_int_eq(fscanf(p, "max %d quiet %d busy %d %d", &most, &quiet, &a, &b), 4);
    ck_assert_int_eq(pclose(p), 0);
    ck_assert_int_ge(most, 1);
    ck_assert(quiet >= 1 && quiet <= most);
    if (fixed) {
      ck_assert_int_eq(quiet, most);
      ck_assert_int_eq(a, most);
      ck_assert_int_eq(b, most);
    } else { /* the spinning threads alone fill every core */
      ck_assert_int_eq(a, 1);
      ck_assert_int_eq(b, 1);
    }
  }
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ck_assert_int_eq(system(cmd), 0);
  cg_module_free(m);
  ir_func_free(f);
  ir_workload_free(w);
}
END_TEST

/* A temporary too big for the stack is malloc'ed once per thread at the
 * start of the parallel loop's OpenMP region, once per call at the entry
 * when no parallel loop encloses it, and at every iteration only under a
 * vectorized loop (whose lanes must not share it); in each case sized to the
 * 128 x 160 rows one iteration of i_0 uses, whatever the buffer's scope. */
START_TEST(test_c_big_caches_on_heap) {
  ir_workload_t *w = load_wl("square.tw", "M=256,N=160");
  const ir_scope_t scopes[2] = {IR_SCOPE_LOCAL, IR_SCOPE_GLOBAL};
  for (int k = 0; k < 2; k++) {
    ir_func_t *f = sched_square_cache(w->func, IR_LOOP_PARALLEL, scopes[k]);
    char *src = check_c(f, w->func);
    HAS(src, "  #pragma omp parallel num_threads(tuned_team())\n  {\n"
             "    float *A_local = (float *)malloc(sizeof(float) * 20480);  /* one per thread */\n"
             "    if (!(A_local)) {\n    #pragma omp atomic write\n      tuned_status = -1;\n    }\n"
             "    #pragma omp for\n    for (int i_0 = 0; i_0 < 2; ++i_0) {\n      if (A_local) {\n");
    HAS(src, "A_local[ax0 * 160 + v1] = A[v0 * 160 + v1];"); /* rows rebased to i_0 * 128 */
    HAS(src, "    free(A_local);\n  }\n  return tuned_status;");
    LACKS(src, "omp parallel for");
    free(src);
    ir_func_free(f);

    f = sched_square_cache(w->func, -1, scopes[k]);
    src = check_c(f, w->func);
    HAS(src, "float *A_local = (float *)malloc(sizeof(float) * 40960);");
    HAS(src, "if (!A_local) {");
    free(src);
    ir_func_free(f);
  }
  /* placement does not depend on the scope: global only from here */
  ir_func_t *f = sched_square_cache(w->func, IR_LOOP_SERIAL, IR_SCOPE_GLOBAL);
  char *src = check_c(f, w->func);
  HAS(src, "  int tuned_status = 0;\n  float *A_local = (float *)malloc(sizeof(float) * 20480);\n"
           "  if (!A_local) {\n");
  free(src);
  ir_func_free(f);

  f = sched_square_cache(w->func, IR_LOOP_VECTORIZED, IR_SCOPE_GLOBAL);
  src = check_c(f, w->func);
  HAS(src, "  for (int i_0 = 0; i_0 < 2; ++i_0) {\n"
           "    float *A_local = (float *)malloc(sizeof(float) * 20480);\n    if (A_local) {\n");
  HAS(src, "tuned_status = -1;");
  HAS(src, "free(A_local);");
  free(src);
  ir_func_free(f);

  /* under the parallel loop and a (unit) vectorized one: per iteration, and
   * a thread whose malloc fails sets the status atomically */
  f = sched_square_cache(w->func, IR_LOOP_PARALLEL, IR_SCOPE_GLOBAL);
  ir_loop_t *i0 = &f->root->u.block.body->u.loop;
  i0->body = loop(f, ir_var_new(f, "u", IR_INT32), 1, IR_LOOP_VECTORIZED, NULL, i0->body);
  src = check_c(f, w->func);
  HAS(src, "  #pragma omp parallel for num_threads(tuned_team())\n  for (int i_0 = 0; i_0 < 2; ++i_0) {\n    {\n      int u = 0;\n"
           "      float *A_local = (float *)malloc(sizeof(float) * 20480);\n");
  HAS(src, "} else {\n      #pragma omp atomic write\n        tuned_status = -1;\n");
  free(src);
  ir_func_free(f);
  ir_workload_free(w);
}
END_TEST

START_TEST(test_c_gpu_schedules_run_serially) {
  /* thread-bound loops are serial loops on the C target */
  ir_workload_t *w = load_wl("matmul.tw", "M=64,N=64,K=64");
  ir_func_t *f = sched_matmul_gpu(w->func);
  char *src = check_c(f, w->func);
  HAS(src, "float C_local[16];");
  HAS(src, "float A_shared[128];");
  LACKS(src, "threadIdx");
  free(src);
  ir_func_free(f);
  ir_workload_free(w);
}
END_TEST

/* ======================================================================
 * Tests: GPU targets
 * ====================================================================== */

static void json_dims(const char *json, int k, const char *key, int64_t out[3]) {
  cJSON *root = cJSON_Parse(json);
  ck_assert_ptr_nonnull(root);
  cJSON *kern = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "kernels"), k);
  ck_assert_ptr_nonnull(kern);
  cJSON *arr = cJSON_GetObjectItem(kern, key);
  if (cJSON_IsArray(arr))
    for (int a = 0; a < 3; a++) out[a] = (int64_t)cJSON_GetArrayItem(arr, a)->valuedouble;
  else
    out[0] = (int64_t)arr->valuedouble;
  cJSON_Delete(root);
}

START_TEST(test_gpu_vector_add) {
  ir_workload_t *w = load_wl("vector_add.tw", "N=1024");
  ir_func_t *f = bind_outer(w->func, 128);
  gpu_out_t o = check_gpu(f, w->func);
  HAS(o.cuda, "extern \"C\" __global__ void __launch_bounds__(128) kern_kernel0(float *__restrict__ A, "
              "float *__restrict__ B, float *__restrict__ C) {");
  HAS(o.cuda, "int bx = (int)blockIdx.x;");
  HAS(o.cuda, "int tx = (int)threadIdx.x;");
  HAS(o.cuda, "int v_i = bx * 128 + tx;");
  HAS(o.cuda, "C[v_i] = A[v_i] + B[v_i];");
  HAS(o.opencl, "__kernel __attribute__((reqd_work_group_size(128, 1, 1))) void kern_kernel0(__global "
                "float *restrict A, __global float *restrict B, __global float *restrict C) {");
  HAS(o.opencl, "int bx = (int)get_group_id(0);");
  int64_t grid[3], blk[3], dyn[3];
  json_dims(o.cuda_json, 0, "grid", grid);
  json_dims(o.cuda_json, 0, "block", blk);
  json_dims(o.cuda_json, 0, "dyn_shared_bytes", dyn);
  ck_assert(grid[0] == 8 && grid[1] == 1 && grid[2] == 1);
  ck_assert(blk[0] == 128 && blk[1] == 1 && blk[2] == 1);
  ck_assert_int_eq(dyn[0], 0);
  HAS(o.cuda_json, "\"role\":\t\"output\"");
  gpu_out_free(&o);
  ir_func_free(f);
  ir_workload_free(w);
}
END_TEST

START_TEST(test_gpu_all_workloads) {
  /* every workload, its outermost loops bound (predicated where 64 threads
   * do not divide), one kernel per statement */
  ir_workload_t *w = load_wl(small[_i].file, small[_i].sets);
  ir_func_t *f = bind_outer(w->func, 64);
  gpu_out_t o = check_gpu(f, w->func);
  int n = root_count(f);
  char name[64];
  snprintf(name, sizeof name, "kern_kernel%d(", n - 1);
  HAS(o.cuda, name);
  HAS(o.opencl, name);
  gpu_out_free(&o);
  ir_func_free(f);
  ir_workload_free(w);
}
END_TEST

START_TEST(test_gpu_dtypes) {
  const char *progs[] = {
      "param N = 300\ninput A: float16[N]\ninput B: float16[N]\noutput C: float16[N]\n"
      "C[i] = A[i] * B[i] + 1.0\n",
      "param N = 200\ninput A: int32[N]\ninput B: int32[N]\noutput C: int32[N]\n"
      "C[i] = A[i] / 3 + B[i] % 5 + max(A[i], 2) * min(B[i], 4)\n",
      "param N = 70\ninput A: float64[N]\noutput C: float64[N]\n"
      "C[i] = sqrt(abs(A[i])) + pow(A[i], 2.0) + tanh(A[i])\n",
      "param N = 90\ninput A: int64[N]\noutput C: int64[N]\nC[i] = A[i] * A[i] - A[i] // 3\n",
      "param N = 300\ninput A: bfloat16[N]\ninput B: bfloat16[N]\noutput C: bfloat16[N]\n"
      "C[i] = A[i] * B[i] + 1.0\n",
  };
  for (size_t k = 0; k < TN_ARRAY_LEN(progs); k++) {
    ir_workload_t *w = text_wl(progs[k]);
    ir_func_t *f = bind_outer(w->func, 64);
    gpu_out_t o = check_gpu(f, w->func);
    if (k == 0) {
      HAS(o.cuda, "#include <cuda_fp16.h>");
      HAS(o.cuda, "__half *__restrict__ A");
      HAS(o.cuda, "C[v_i] = __float2half(__half2float(A[v_i]) * __half2float(B[v_i]) + 1.0f);");
      HAS(o.opencl, "vstore_half(vload_half(v_i, A) * vload_half(v_i, B) + 1.0f, v_i, C);");
    }
    if (k == 2) HAS(o.opencl, "#pragma OPENCL EXTENSION cl_khr_fp64 : enable");
    if (k == 4) {
      HAS(o.cuda, "#include <cuda_bf16.h>");
      HAS(o.cuda, "C[v_i] = __float2bfloat16(__bfloat162float(A[v_i]) * __bfloat162float(B[v_i]) + 1.0f);");
      HAS(o.opencl, "C[v_i] = tuned_f2bf(tuned_bf2f(A[v_i]) * tuned_bf2f(B[v_i]) + 1.0f);");
      HAS(o.opencl, "static inline ushort tuned_f2bf(float f)");
    }
    gpu_out_free(&o);
    ir_func_free(f);
    ir_workload_free(w);
  }
}
END_TEST

START_TEST(test_gpu_vthread) {
  ir_workload_t *w = load_wl("vector_add.tw", "N=1024");
  ir_func_t *f = ir_func_copy(w->func);
  ir_stmt_t *s = root_item(f, 0), *blk = s->u.loop.body;
  ir_var_t *b = ir_var_new(f, "i_0", IR_INT32), *v = ir_var_new(f, "i_1", IR_INT32),
           *t = ir_var_new(f, "i_2", IR_INT32);
  blk->u.block.iters[0].binding = add(f, mul(f, V(f, b), 256), mad(f, v, 128, t));
  set_root(f, loop(f, b, 4, 0, "blockIdx.x", loop(f, v, 2, 0, "vthread.x", loop(f, t, 128, 0, "threadIdx.x", blk))));
  gpu_out_t o = check_gpu(f, w->func);
  HAS(o.cuda, "#pragma unroll\n");
  HAS(o.cuda, "for (int i_1 = 0; i_1 < 2; ++i_1) {");
  gpu_out_free(&o);
  ir_func_free(f);
  ir_workload_free(w);
}
END_TEST

START_TEST(test_gpu_vector_partial) {
  /* B[i] = A[i] + A[i + 1] + A[i + 2] over float2 lanes: A[i] and A[i + 2]
   * are aligned vector loads, A[i + 1] stays scalar, B gets one float2 */
  ir_workload_t *w = load_wl("window_sum.tw", "N=64");
  ir_func_t *f = ir_func_copy(w->func);
  ir_stmt_t *blk = root_item(f, 0)->u.loop.body;
  ir_var_t *b = ir_var_new(f, "i_0", IR_INT32), *t = ir_var_new(f, "i_1", IR_INT32),
           *v = ir_var_new(f, "i_2", IR_INT32);
  blk->u.block.iters[0].binding = add(f, mul(f, V(f, b), 16), mad(f, t, 2, v));
  set_root(f, loop(f, b, 4, 0, "blockIdx.x",
                   loop(f, t, 8, 0, "threadIdx.x", loop(f, v, 2, IR_LOOP_VECTORIZED, NULL, blk))));
  gpu_out_t o = check_gpu(f, w->func);
  ck_assert_int_eq(count(o.cuda, "*(const float2 *)(A + "), 2);
  HAS(o.cuda, "*(float2 *)(B + i_0 * 16 + i_1 * 2) = tuned_vout0;");
  HAS(o.cuda, "A[v_i + 1]");
  ck_assert_int_eq(count(o.opencl, "vload2(0, A + "), 2);
  HAS(o.opencl, "vstore2(tuned_vout0, 0, B + i_0 * 16 + i_1 * 2);");
  gpu_out_free(&o);
  /* a misaligned store (odd offset, wrapping) keeps the plain unrolled loop */
  ir_expr_t *shifted = add(f, add(f, mul(f, V(f, b), 16), mad(f, t, 2, v)), K(f, 1));
  blk->u.block.iters[0].binding = ir_bin(f, IR_E_FLOORMOD, shifted, K(f, 64));
  o = check_gpu(f, w->func);
  LACKS(o.cuda, "float2");
  HAS(o.cuda, "#pragma unroll\n");
  gpu_out_free(&o);
  ir_func_free(f);
  ir_workload_free(w);
}
END_TEST

START_TEST(test_gpu_matmul_tiled) {
  ir_workload_t *w = load_wl("matmul.tw", "M=64,N=64,K=64");
  ir_func_t *f = sched_matmul_gpu(w->func);
  /* the hand schedule itself computes the same as the workload */
  ir_data_t *d, *r;
  make_data(f, w->func, &d, &r);
  tn_err_t err = {0};
  ck_assert_msg(ir_eval(f, d, &err) == 0, "%s", err.msg);
  ck_assert(ir_rel_l2_error(r->vals[2], d->vals[2], d->sizes[2]) < 1e-12);
  ir_data_free(d);
  ir_data_free(r);

  gpu_out_t o = check_gpu(f, w->func);
  /* sizes from the region used, not the 64x64 buffer shapes */
  HAS(o.cuda, "__shared__ __align__(16) float A_shared[128];");
  HAS(o.cuda, "__shared__ __align__(16) float B_shared[128];");
  HAS(o.cuda, "float C_local[16];");
  HAS(o.opencl, "__local float A_shared[128];");
  /* float4 cooperative fetch */
  HAS(o.cuda, "*(const float4 *)(A + ");
  HAS(o.cuda, "*(float4 *)(A_shared + ");
  HAS(o.opencl, "vload4(0, B + ");
  HAS(o.opencl, "vstore4(tuned_vout");
  /* one barrier after the fetches, one before they are overwritten */
  ck_assert_int_eq(count(o.cuda, "__syncthreads();"), 2);
  ck_assert_int_eq(count(o.opencl, "barrier(CLK_LOCAL_MEM_FENCE);"), 2);
  HAS(o.cuda, "int i_0 = (int)blockIdx.y;");
  HAS(o.cuda, "int j_1 = (int)threadIdx.x;");
  int64_t grid[3], blk[3], sh[3];
  json_dims(o.cuda_json, 0, "grid", grid);
  json_dims(o.cuda_json, 0, "block", blk);
  json_dims(o.cuda_json, 0, "static_shared_bytes", sh);
  ck_assert(grid[0] == 4 && grid[1] == 4 && grid[2] == 1);
  ck_assert(blk[0] == 4 && blk[1] == 4 && blk[2] == 1);
  ck_assert_int_eq(sh[0], 1024);
  gpu_out_free(&o);
  ir_func_free(f);
  ir_workload_free(w);
}
END_TEST

/* sched_matmul_gpu's k_0 loop: fetches of A and B tiles, then the products. */
static ir_stmt_t *matmul_gpu_k_loop(ir_func_t *f) {
  ir_stmt_t *s = root_item(f, 0);
  for (int i = 0; i < 4; i++) s = s->u.loop.body;
  return s->u.seq.items[0];
}

/* software_pipeline_stages on k_0: two copies of each shared tile, the
 * fetches of k_0 + 1 issued (cp.async on CUDA) before the products of k_0,
 * one barrier per iteration; it runs right on the host harness (copies land
 * at the wait, threads shuffled) and on PoCL, and compiles with NVRTC. */
START_TEST(test_gpu_matmul_pipelined) {
  ir_workload_t *w = load_wl("matmul.tw", "M=64,N=64,K=64");
  for (int stages = 2; stages <= 3; stages++) {
    ir_func_t *f = sched_matmul_gpu(w->func);
    ir_loop_t *k = &matmul_gpu_k_loop(f)->u.loop;
    ir_annot_set_int(f, &k->annots, &k->nannots, IR_ANN_PIPELINE_STAGES, stages);
    gpu_out_t o = check_gpu(f, w->func);
    char decl[64];
    snprintf(decl, sizeof decl, "__shared__ __align__(16) float A_shared[%d];", 128 * stages);
    HAS(o.cuda, decl);
    ck_assert_int_eq(count(o.cuda, "__syncthreads();"), 1);
    ck_assert_int_eq(count(o.opencl, "barrier(CLK_LOCAL_MEM_FENCE);"), 1);
    snprintf(decl, sizeof decl, "tuned_cp_wait<%d>();", stages - 2);
    HAS(o.cuda, decl);
    snprintf(decl, sizeof decl, "if (k_0 + %d < 8) {", stages - 1);
    HAS(o.cuda, decl);
    HAS(o.cuda, "tuned_cp_async16(A_shared + (");
    ck_assert_int_eq(count(o.cuda, "tuned_cp_commit();"), stages);
    ck_assert_ptr_null(strstr(o.opencl, "cp_async"));
    int64_t sh[3];
    json_dims(o.cuda_json, 0, "static_shared_bytes", sh);
    ck_assert_int_eq(sh[0], 1024 * stages);
    gpu_out_free(&o);

    /* 1 stage: the plain loop */
    ir_annot_set_int(f, &k->annots, &k->nannots, IR_ANN_PIPELINE_STAGES, 1);
    o = check_gpu(f, w->func);
    ck_assert_int_eq(count(o.cuda, "__syncthreads();"), 2);
    ck_assert_ptr_null(strstr(o.cuda, "tuned_cp"));
    gpu_out_free(&o);
    ir_func_free(f);
  }
  ir_workload_free(w);
}
END_TEST

START_TEST(test_gpu_cross_thread_reduction) {
  /* thread counts: warp segment (16), one warp (32), several warps (128),
   * odd counts with the shared-memory tree (48, 100); predicated splits */
  static const int64_t T[] = {16, 32, 128, 48, 100};
  ir_workload_t *w = load_wl("row_sum.tw", "M=6,N=300");
  for (size_t k = 0; k < TN_ARRAY_LEN(T); k++) {
    ir_func_t *f = sched_rows(w->func, 6, 300, T[k], 1);
    gpu_out_t o = check_gpu(f, w->func);
    HAS(o.cuda, "reduction across threadIdx.x");
    HAS(o.opencl, "tuned_red_buf");
    if (T[k] == 16 || T[k] == 32 || T[k] == 128) HAS(o.cuda, "__shfl_down_sync(tuned_mask, tuned_red");
    else HAS(o.cuda, "tuned_red_buf");
    HAS(o.cuda, "if ((int)threadIdx.x == 0) {");
    gpu_out_free(&o);
    ir_func_free(f);
  }
  /* two rows per block on threadIdx.y: groups reduce separately */
  ir_workload_t *w2 = load_wl("row_sum.tw", "M=8,N=77");
  for (int k = 0; k < 2; k++) {
    ir_func_t *f = sched_rows(w2->func, 8, 77, k ? 24 : 32, 2);
    gpu_out_t o = check_gpu(f, w2->func);
    gpu_out_free(&o);
    ir_func_free(f);
  }
  ir_workload_free(w2);
  /* other dtypes and combiners */
  const char *progs[] = {
      "param M = 6, N = 70\ninput A: float16[M, N]\noutput R: float16[M]\nR[i] = max(j < N: A[i, j] * 2.0)\n",
      "param M = 4, N = 50\ninput A: int32[M, N]\noutput R: int32[M]\nR[i] = sum(j < N: A[i, j])\n",
      "param M = 3, N = 90\ninput A: float64[M, N]\noutput R: float64[M]\nR[i] = min(j < N: A[i, j])\n",
  };
  for (size_t k = 0; k < TN_ARRAY_LEN(progs); k++)
    for (int t = 0; t < 2; t++) {
      ir_workload_t *pw = text_wl(progs[k]);
      int64_t M = pw->func->params[1]->shape[0], N = pw->func->params[0]->shape[1];
      ir_func_t *f = sched_rows(pw->func, M, N, t ? 12 : 64, 1);
      gpu_out_t o = check_gpu(f, pw->func);
      gpu_out_free(&o);
      ir_func_free(f);
      ir_workload_free(pw);
    }
  ir_workload_free(w);
}
END_TEST

START_TEST(test_gpu_cross_thread_decomposed) {
  /* the init as its own block, run by one thread of each block (guarded),
   * the update across threads adding to the stored value */
  ir_workload_t *w = load_wl("row_sum.tw", "M=6,N=100");
  ir_func_t *f = sched_rows(w->func, 6, 100, 32, 1);
  ir_stmt_t *rows = root_item(f, 0), *nest = rows->u.loop.body;
  ir_block_t *upd = &nest->u.loop.body->u.loop.body->u.block;
  ir_var_t *vi = ir_var_new(f, "v_i", IR_INT32);
  int64_t ext[1] = {6};
  ir_expr_t *bind[1] = {V(f, rows->u.loop.var)};
  ir_expr_t *idx[1] = {V(f, vi)};
  ir_stmt_t *init = block(f, "R_init", 1, &vi, ext, "S", bind, NULL,
                          ir_store(f, f->params[1], idx, 1, ir_float(f, IR_FLOAT32, 0)));
  upd->init = NULL;
  upd->name = "R_update";
  rows->u.loop.body = seq2(f, init, nest);
  gpu_out_t o = check_gpu(f, w->func);
  HAS(o.cuda, "if ((int)threadIdx.x == 0) {\n        R[v_i] = 0.0f;");
  HAS(o.cuda, "R[v_i_1] = R[v_i_1] + tuned_red0;");
  ck_assert_int_eq(count(o.cuda, "__syncthreads();"), 1);
  gpu_out_free(&o);
  ir_func_free(f);
  ir_workload_free(w);
}
END_TEST

START_TEST(test_gpu_fused_softmax) {
  /* all four statements under one blockIdx loop: two cross-thread
   * reductions (max, sum) and global temporaries as workspaces, with
   * barriers between the stages */
  ir_workload_t *w = load_wl("softmax.tw", "M=5,N=70");
  ir_func_t *f = sched_rows(w->func, 5, 70, 32, 1);
  gpu_out_t o = check_gpu(f, w->func);
  /* rmax and rsum are written by one thread and read by all after a
   * barrier: not restrict, or NVRTC may read them before the barrier (it
   * did on an H100 with a two-kernel softmax); A is only read */
  HAS(o.cuda, "float *rmax,");
  HAS(o.cuda, "float *rsum)");
  HAS(o.cuda, "float *__restrict__ A");
#if CG_TEST_NVRTC
  {
    /* the normalisation after the last barrier reads the row's max and
     * sum from global memory, with a coherent load */
    char *ptx = nvrtc_ptx(o.cuda, "sm_90");
    const char *last = NULL;
    for (const char *q = strstr(ptx, "bar.sync"); q; q = strstr(q + 1, "bar.sync")) last = q;
    ck_assert_ptr_nonnull(last);
    ck_assert_msg(strstr(last, "ld.global.f32"), "no global read after the last barrier:\n%s", ptx);
    free(ptx);
  }
#endif
  HAS(o.cuda, "fmaxf(tuned_red");
  ck_assert_int_ge(count(o.opencl, "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);"), 3);
  HAS(o.cuda_json, "\"role\":\t\"workspace\"");
  cg_module_t *m = lower_ok(f, CG_TARGET_CUDA);
  ck_assert_int_eq(m->nkernels, 1);
  ck_assert_int_eq(m->nparams, 5);
  ck_assert_str_eq(m->params[2].name, "rmax");
  ck_assert_int_eq(m->params[2].role, IR_BUF_TEMP);
  cg_module_free(m);
  gpu_out_free(&o);
  ir_func_free(f);
  /* the same with 16 threads (shuffles within half warps) */
  f = sched_rows(w->func, 5, 70, 16, 1);
  o = check_gpu(f, w->func);
  gpu_out_free(&o);
  ir_func_free(f);
  ir_workload_free(w);
}
END_TEST

/* The schedule of a trace file of the source tree (path relative to it), replayed on f. */
static sch_t *replay_file(const ir_func_t *f, const char *rel) {
  char path[512], *text = NULL;
  size_t len;
  tn_err_t err = {0};
  snprintf(path, sizeof path, "%s/%s", TUNED_SOURCE_ROOT, rel);
  ck_assert_msg(tn_read_file(path, 1 << 20, &text, &len, &err) == TN_OK, "%s", err.msg);
  sch_trace_t *t = NULL;
  ck_assert_msg(sch_trace_from_json(text, len, &t, &err) == TN_OK, "%s", err.msg);
  sch_t *s = NULL;
  ck_assert_msg(sch_replay(f, t, 1, &s, &err) == TN_OK, "%s", err.msg);
  sch_trace_free(t);
  free(text);
  return s;
}

START_TEST(test_gpu_no_restrict_across_barrier) {
  /* the softmax candidate that verified wrong on an H100 (bench/gpu/traces):
   * kernel 1 sums a row across threads, thread 0 writes rsum, a barrier,
   * then every thread divides by rsum.  rsum restrict-qualified, NVRTC
   * loaded it before the barrier in the threads other than 0. */
  ir_workload_t *w = load_wl("softmax.tw", "M=8,N=1024");
  sch_t *s = replay_file(w->func, "bench/gpu/traces/softmax4096_restrict_race.json");
  cg_module_t *m = lower_ok(sch_func(s), CG_TARGET_CUDA);
  ck_assert_int_eq(m->nkernels, 2);
  const char *k1 = strstr(m->source, "kern_kernel1(");
  ck_assert_ptr_nonnull(k1);
  /* kernel 0 writes and reads rmax, kernel 1 writes and reads rsum */
  HAS(m->source, "kern_kernel0(float *__restrict__ A, float *__restrict__ S, float *rmax, float *__restrict__ rsum)");
  HAS(k1, "kern_kernel1(float *__restrict__ A, float *__restrict__ S, float *__restrict__ rmax, float *rsum)");
  run_cuda_host(w->func, m);
#if CG_TEST_NVRTC
  char *ptx = nvrtc_ptx(m->source, "sm_90");
  const char *entry = strstr(ptx, ".entry kern_kernel1"), *last = NULL;
  ck_assert_ptr_nonnull(entry);
  for (const char *q = strstr(entry, "bar.sync"); q; q = strstr(q + 1, "bar.sync")) last = q;
  ck_assert_ptr_nonnull(last);
  ck_assert_msg(strstr(last, "ld.global.f32"), "rsum is not read after the last barrier:\n%.1500s", last);
  free(ptx);
#endif
  cg_module_free(m);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* ======================================================================
 * Tests: schedules made with the schedule module
 * ====================================================================== */

#define SCH_OK(call)                                        \
  do {                                                      \
    tn_err_t e_ = {0};                                      \
    tn_err_t *err = &e_;                                    \
    ck_assert_msg((call) == 0, "%s: %s", #call, e_.msg);    \
  } while (0)

/* Splits l by factors (0 = inferred); out gets the new loops. */
static void sch_split_n(sch_t *s, sch_rv_t l, const int64_t *f, int n, sch_rv_t *out) {
  sch_arg_t a[8];
  for (int i = 0; i < n; i++) a[i] = f[i] ? sch_arg_int(f[i]) : sch_arg_none();
  SCH_OK(sch_split(s, l, a, n, out, err));
}

static sch_rv_t fuse2(sch_t *s, sch_rv_t a, sch_rv_t b) {
  sch_rv_t pair[2] = {a, b}, out;
  SCH_OK(sch_fuse(s, pair, 2, &out, err));
  return out;
}

/* TVM's CUDA multi-level tiling for matmul 64^3: blockIdx / vthread /
 * threadIdx tiles, a local write cache, shared read caches at k_0 with
 * cooperative float4 fetches, the reduction decomposed. */
static sch_t *mlt_cuda_tiles(const ir_func_t *f, const int64_t fi[4], int stages) {
  sch_t *s = sch_create(f, 1);
  sch_rv_t b, l[3], is[4], js[4], ks[2], cl, init;
  int n;
  SCH_OK(sch_get_block(s, "C", &b, err));
  SCH_OK(sch_get_loops(s, b, l, &n, err));
  int64_t fk[2] = {8, 8};
  sch_split_n(s, l[0], fi, 4, is);
  sch_split_n(s, l[1], fi, 4, js);
  sch_split_n(s, l[2], fk, 2, ks);
  sch_rv_t order[10] = {is[0], js[0], is[1], js[1], is[2], js[2], ks[0], ks[1], is[3], js[3]};
  SCH_OK(sch_reorder(s, order, 10, err));
  sch_rv_t bx = fuse2(s, is[0], js[0]), vx = fuse2(s, is[1], js[1]), tx = fuse2(s, is[2], js[2]);
  SCH_OK(sch_bind(s, bx, "blockIdx.x", err));
  SCH_OK(sch_bind(s, vx, "vthread.x", err));
  SCH_OK(sch_bind(s, tx, "threadIdx.x", err));
  SCH_OK(sch_cache_write(s, b, 0, "local", &cl, err));
  SCH_OK(sch_reverse_compute_at(s, cl, tx, true, err));
  for (int r = 0; r < 2; r++) {
    sch_rv_t sh, sl[8], parts[3];
    SCH_OK(sch_cache_read(s, b, r, "shared", &sh, err));
    SCH_OK(sch_compute_at(s, sh, ks[0], true, err));
    SCH_OK(sch_get_loops(s, sh, sl, &n, err));
    int64_t ff[3] = {0, 16, 4};
    sch_split_n(s, fuse2(s, sl[n - 2], sl[n - 1]), ff, 3, parts);
    SCH_OK(sch_bind(s, parts[1], "threadIdx.x", err));
    SCH_OK(sch_vectorize(s, parts[2], err));
  }
  SCH_OK(sch_decompose_reduction(s, b, ks[0], &init, err));
  SCH_OK(sch_annotate(s, bx, "pragma_auto_unroll_max_step", sch_arg_int(64), err));
  if (stages > 1) SCH_OK(sch_annotate(s, ks[0], IR_ANN_PIPELINE_STAGES, sch_arg_int(stages), err));
  return s;
}

static sch_t *mlt_cuda(const ir_func_t *f) {
  static const int64_t fi[4] = {2, 2, 4, 4};
  return mlt_cuda_tiles(f, fi, 1);
}

/* Over the 48 KiB static __shared__ arrays may hold, a CUDA kernel's shared
 * buffers are carved from one dynamic shared array whose size the launch
 * passes (the host harness sees a static array); OpenCL keeps __local
 * arrays.  Here: 512-row tiles of A and B, 8 deep, in 3 pipeline stages. */
START_TEST(test_gpu_dynamic_shared) {
  ir_workload_t *w = load_wl("matmul.tw", "M=512,N=512,K=64");
  static const int64_t fi[4] = {1, 8, 4, 16};
  sch_t *s = mlt_cuda_tiles(w->func, fi, 3);
  gpu_out_t o = check_gpu(sch_func(s), w->func);
  HAS(o.cuda, "  extern __shared__ __align__(16) unsigned char tuned_dyn_shared[];\n");
  HAS(o.cuda, "  __shared__ __align__(16) unsigned char tuned_dyn_shared[98304];\n");
  HAS(o.cuda, "float *A_shared = (float *)(tuned_dyn_shared + 0);  /* 12288 elements */");
  HAS(o.cuda, "float *B_shared = (float *)(tuned_dyn_shared + 49152);");
  HAS(o.opencl, "__local float A_shared[12288];");
  int64_t dyn[3], st[3];
  json_dims(o.cuda_json, 0, "dyn_shared_bytes", dyn);
  json_dims(o.cuda_json, 0, "static_shared_bytes", st);
  ck_assert_int_eq(dyn[0], 98304);
  ck_assert_int_eq(st[0], 0);
  gpu_out_free(&o);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* A CPU schedule: i_0 parallel, j_1 vectorized, k_1 unrolled, a write
 * cache of the given scope at j_0, the reduction decomposed. */
static sch_t *tile_cpu(const ir_func_t *f, const char *scope) {
  sch_t *s = sch_create(f, 1);
  sch_rv_t b, l[3], is[2], js[2], ks[2], cw, init;
  int n;
  SCH_OK(sch_get_block(s, "C", &b, err));
  SCH_OK(sch_get_loops(s, b, l, &n, err));
  int64_t fi[2] = {0, 8}, fj[2] = {0, 16}, fk[2] = {0, 4};
  sch_split_n(s, l[0], fi, 2, is);
  sch_split_n(s, l[1], fj, 2, js);
  sch_split_n(s, l[2], fk, 2, ks);
  sch_rv_t order[6] = {is[0], js[0], ks[0], is[1], ks[1], js[1]};
  SCH_OK(sch_reorder(s, order, 6, err));
  SCH_OK(sch_parallel(s, is[0], err));
  SCH_OK(sch_vectorize(s, js[1], err));
  SCH_OK(sch_unroll(s, ks[1], err));
  SCH_OK(sch_cache_write(s, b, 0, scope, &cw, err));
  SCH_OK(sch_reverse_compute_at(s, cw, js[0], true, err));
  SCH_OK(sch_decompose_reduction(s, b, ks[0], &init, err));
  SCH_OK(sch_annotate(s, is[0], "pragma_auto_unroll_max_step", sch_arg_int(16), err));
  return s;
}

/* i_0 (parallel) j_0 k i_1 j_1 (vectorized), reduction decomposed at k:
 * the update under k accumulates an i_1 x j_1 tile of C. */
static sch_t *tile_promote(const ir_func_t *f, int64_t ti, int64_t tj) {
  sch_t *s = sch_create(f, 1);
  sch_rv_t b, l[3], is[2], js[2], init;
  int n;
  SCH_OK(sch_get_block(s, "C", &b, err));
  SCH_OK(sch_get_loops(s, b, l, &n, err));
  int64_t fi[2] = {0, ti}, fj[2] = {0, tj};
  sch_split_n(s, l[0], fi, 2, is);
  sch_split_n(s, l[1], fj, 2, js);
  sch_rv_t order[5] = {is[0], js[0], l[2], is[1], js[1]};
  SCH_OK(sch_reorder(s, order, 5, err));
  SCH_OK(sch_parallel(s, is[0], err));
  SCH_OK(sch_vectorize(s, js[1], err));
  SCH_OK(sch_unroll(s, is[1], err));
  SCH_OK(sch_decompose_reduction(s, b, l[2], &init, err));
  return s;
}

/* MetaSchedule's CPU multi-level tiling (SSRSRS) of matmul: i_0 j_0 i_1 j_1
 * k_0 i_2 j_2 k_1 i_3 j_3 with i_0 j_0 fused and parallel, i_3 unrolled,
 * j_3 vectorized, a global write cache at j_1 (its tile: (i_2 i_3) x (j_2
 * j_3)), the reduction decomposed at k_0. */
static sch_t *mlt_cpu(const ir_func_t *f, const int64_t fi[4], const int64_t fj[4], const int64_t fk[2]) {
  sch_t *s = sch_create(f, 1);
  sch_rv_t b, l[3], is[4], js[4], ks[2], cw, init;
  int n;
  SCH_OK(sch_get_block(s, "C", &b, err));
  SCH_OK(sch_get_loops(s, b, l, &n, err));
  sch_split_n(s, l[0], fi, 4, is);
  sch_split_n(s, l[1], fj, 4, js);
  sch_split_n(s, l[2], fk, 2, ks);
  sch_rv_t order[10] = {is[0], js[0], is[1], js[1], ks[0], is[2], js[2], ks[1], is[3], js[3]};
  SCH_OK(sch_reorder(s, order, 10, err));
  SCH_OK(sch_cache_write(s, b, 0, "global", &cw, err));
  SCH_OK(sch_reverse_compute_at(s, cw, js[1], true, err));
  SCH_OK(sch_parallel(s, fuse2(s, is[0], js[0]), err));
  SCH_OK(sch_unroll(s, is[3], err));
  SCH_OK(sch_vectorize(s, js[3], err));
  SCH_OK(sch_decompose_reduction(s, b, ks[0], &init, err));
  return s;
}

/* softmax with every stage computed at the rows' blockIdx loop, each
 * reduction across 32 threads. */
static sch_t *softmax_rows(const ir_func_t *f) {
  sch_t *s = sch_create(f, 1);
  sch_rv_t bs, l[2], jj[2];
  int n;
  int64_t f32[2] = {0, 32};
  SCH_OK(sch_get_block(s, "S", &bs, err));
  SCH_OK(sch_get_loops(s, bs, l, &n, err));
  sch_split_n(s, l[1], f32, 2, jj);
  SCH_OK(sch_bind(s, l[0], "blockIdx.x", err));
  SCH_OK(sch_bind(s, jj[1], "threadIdx.x", err));
  const char *names[3] = {"rsum", "E", "rmax"};
  for (int k = 0; k < 3; k++) {
    sch_rv_t b, bl[4], p[2];
    SCH_OK(sch_get_block(s, names[k], &b, err));
    SCH_OK(sch_compute_at(s, b, l[0], true, err));
    SCH_OK(sch_get_loops(s, b, bl, &n, err));
    sch_split_n(s, bl[n - 1], f32, 2, p);
    SCH_OK(sch_bind(s, p[1], "threadIdx.x", err));
  }
  return s;
}

START_TEST(test_schedule_module_gpu) {
  ir_workload_t *w = load_wl("matmul.tw", "M=64,N=64,K=64");
  sch_t *s = mlt_cuda(w->func);
  gpu_out_t o = check_gpu(sch_func(s), w->func);
  HAS(o.cuda, "__shared__ __align__(16) float A_shared[256];");
  /* vthread injection: the 4 virtual threads share the staged tiles; each
   * has its own 16-element slice of the write cache, and the vthread loop
   * sits under the reduction loop, around each statement that uses it
   * (init, update, write-back), not around the k loop and the fetches. */
  HAS(o.cuda, "float C_local[64];");
  ck_assert_int_eq(count(o.cuda, "for (int i_1_j_1_fused = 0; i_1_j_1_fused < 4; ++i_1_j_1_fused) {"), 3);
  HAS(o.cuda, "+ i_1_j_1_fused * 16]");
  const char *k0 = strstr(o.cuda, "for (int k_0 ");
  ck_assert_ptr_nonnull(k0);
  ck_assert_int_eq(count(k0, "for (int i_1_j_1_fused"), 2);
  ck_assert(strstr(k0, "block A_shared") < strstr(k0, "for (int i_1_j_1_fused"));
  ck_assert_int_eq(count(o.cuda, "__syncthreads();"), 2);
  ck_assert_int_eq(count(o.cuda, "*(const float4 *)"), 2);
  char *src = check_c(sch_func(s), w->func);
  free(src);
  gpu_out_free(&o);
  sch_free(s);
  ir_workload_free(w);

  /* float16: half storage in CUDA shared/local arrays, float in OpenCL's;
   * no float4 for halves */
  w = text_wl("param M = 64, N = 64, K = 64\ninput A: float16[M, K]\ninput B: float16[K, N]\n"
              "output C: float16[M, N]\nC[i, j] = sum(k < K: A[i, k] * B[k, j])\n");
  s = mlt_cuda(w->func);
  o = check_gpu(sch_func(s), w->func);
  HAS(o.cuda, "__shared__ __align__(16) __half A_shared[256];");
  HAS(o.cuda, "__half C_local[64];");
  HAS(o.opencl, "__local float A_shared[256];");
  HAS(o.opencl, "float C_local[64];");
  LACKS(o.cuda, "float4");
  gpu_out_free(&o);
  sch_free(s);
  ir_workload_free(w);

  w = load_wl("softmax.tw", "M=5,N=70");
  s = softmax_rows(w->func);
  o = check_gpu(sch_func(s), w->func);
  ck_assert_int_eq(count(o.cuda, "reduction across threadIdx.x (32 threads)"), 2);
  ck_assert_int_eq(count(o.cuda, "__syncthreads();"), 3);
  gpu_out_free(&o);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

START_TEST(test_schedule_module_cpu) {
  ir_workload_t *w = load_wl("matmul.tw", "M=64,N=48,K=20");
  sch_t *s = tile_cpu(w->func, "local");
  char *src = check_c(sch_func(s), w->func);
  HAS(src, "float C_local[128];");
  HAS(src, "#pragma omp parallel for num_threads(tuned_team())\n");
  HAS(src, "#pragma omp simd\n");
  HAS(src, "#pragma GCC unroll 4\n");
  free(src);
  sch_free(s);
  s = tile_cpu(w->func, "global");
  src = check_c(sch_func(s), w->func);
  /* the write cache is the 8 x 16 tile of one (i_0, j_0), not the whole C */
  HAS(src, "float C_global[128];");
  HAS(src, "C[v0 * 48 + v1] = C_global[ax0 * 16 + ax1];");
  LACKS(src, "malloc(");
  free(src);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* The tile a serial loop accumulates is kept in a local array (register
 * promotion), and only where that computes the same values. */
START_TEST(test_c_promoted_accumulators) {
  ir_workload_t *w = load_wl("matmul.tw", "M=64,N=48,K=20");
  sch_t *s = tile_promote(w->func, 4, 16);
  char *src = check_c(sch_func(s), w->func);
  HAS(src, "float tuned_acc0[64];");
  HAS(src, "tuned_acc0[(i_1) * 16 + j_1] = C[v_i * 48 + v_j];");
  HAS(src, "tuned_acc0[(i_1) * 16 + j_1] = tuned_acc0[(i_1) * 16 + j_1] + A[v_i * 20 + v_k] * B[v_k * 48 + v_j];");
  HAS(src, "C[v_i * 48 + v_j] = tuned_acc0[(i_1) * 16 + j_1];");
  free(src);
  sch_free(s);
  /* 5 does not divide 64: the update has a predicate, so no promotion */
  s = tile_promote(w->func, 5, 16);
  src = check_c(sch_func(s), w->func);
  ck_assert_msg(!strstr(src, "tuned_acc"), "%s", src);
  free(src);
  sch_free(s);
  /* unscheduled: the init is inside the k loop, so no promotion either */
  src = check_c(w->func, w->func);
  ck_assert_msg(!strstr(src, "tuned_acc"), "%s", src);
  free(src);
  /* k_0 i_1 k_1 j_1 with k_1 unrolled: the tile spans both reduction loops */
  s = tile_cpu(w->func, "local");
  src = check_c(sch_func(s), w->func);
  HAS(src, "float tuned_acc0[128];");
  HAS(src, "tuned_acc0[(i_1) * 16 + j_1] = C_local[i_1 * 16 + j_1];");
  BEFORE(src, "float tuned_acc0[128];", "for (int k_0 = 0; k_0 < 5; ++k_0) {");
  free(src);
  sch_free(s);
  ir_workload_free(w);

  /* bfloat16 accumulation rounds at every update: never promoted */
  w = text_wl("param M = 8, N = 16, K = 12\ninput A: bfloat16[M, K]\ninput B: bfloat16[K, N]\n"
              "output C: bfloat16[M, N]\nC[i, j] = sum(k < K: A[i, k] * B[k, j])\n");
  s = tile_promote(w->func, 4, 16);
  src = check_c(sch_func(s), w->func);
  LACKS(src, "tuned_acc");
  free(src);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* A float max or min on the C target is tuned_fmaxf and kin: a compare and
 * select that gcc vectorizes (fmaxf it does not: a ReLU epilogue of a conv
 * was one call per element, half its time), with fmaxf's value: a NaN
 * operand loses to a number, in either place, in float and in double. */
START_TEST(test_c_fmax_nan) {
  static const char *const types[] = {"float32", "float64"};
  for (int t = 0; t < 2; t++) {
    char text[400];
    snprintf(text, sizeof text,
             "param N = 6\ninput A: %s[N]\ninput B: %s[N]\noutput Y: %s[N]\noutput Z: %s[N]\n"
             "Y[i] = max(A[i], B[i])\nZ[i] = min(A[i], B[i])\n",
             types[t], types[t], types[t], types[t]);
    ir_workload_t *w = text_wl(text);
    cg_module_t *m = lower_ok(w->func, CG_TARGET_C);
    HAS(m->source, t ? "tuned_fmax(A[" : "tuned_fmaxf(A[");
    HAS(m->source, t ? "tuned_fmin(A[" : "tuned_fminf(A[");
    LACKS(m->source, t ? " fmax(" : " fmaxf(");
    void *h = load_c(m);
    entry_fn fn = (entry_fn)dlsym(h, "tuned_entry_kern");
    ck_assert_ptr_nonnull(fn);
    double a[6] = {1.0, NAN, 2.0, NAN, -0.5, 3.0}, b[6] = {NAN, 1.0, NAN, NAN, -0.25, -3.0};
    double want_max[6] = {1.0, 1.0, 2.0, NAN, -0.25, 3.0}, want_min[6] = {1.0, 1.0, 2.0, NAN, -0.5, -3.0};
    float af[6], bf[6], yf[6], zf[6];
    double y[6], z[6];
    for (int i = 0; i < 6; i++) af[i] = (float)a[i], bf[i] = (float)b[i];
    void *args[4] = {t ? (void *)a : af, t ? (void *)b : bf, t ? (void *)y : yf, t ? (void *)z : zf};
    ck_assert_int_eq(fn(args), 0);
    for (int i = 0; i < 6; i++) {
      double gy = t ? y[i] : yf[i], gz = t ? z[i] : zf[i];
      if (isnan(want_max[i])) ck_assert_msg(isnan(gy) && isnan(gz), "%s element %d", types[t], i);
      else ck_assert_msg(gy == want_max[i] && gz == want_min[i], "%s element %d: max %g min %g", types[t], i, gy, gz);
    }
    cg_module_free(m);
    ir_workload_free(w);
  }
}
END_TEST

/* A serial loop reducing into one element, directly around the update: the
 * accumulator is a scalar and the loop an OpenMP simd reduction, so that gcc
 * vectorises the sum (a softmax's row sum of exp) and the max or min (its row
 * max: a compare and select, which gcc vectorizes where it leaves fmaxf
 * serial; 16x faster on a 1024-wide softmax row); a tile of several elements
 * keeps the array. */
START_TEST(test_c_simd_sum) {
  static const char *const texts[] = {"S[i] = sum(j < N: exp(A[i, j] * 0.01))\n", "S[i] = max(j < N: A[i, j])\n",
                                      "S[i] = min(j < N: A[i, j] * 2.0)\n"};
  for (int t = 0; t < 3; t++) {
    char text[256];
    snprintf(text, sizeof text, "param M = 7, N = 1003\ninput A: float32[M, N]\noutput S: float32[M]\n%s", texts[t]);
    ir_workload_t *w = text_wl(text);
    sch_t *s = sch_create(w->func, 1);
    sch_rv_t b, l[2], init;
    int n;
    SCH_OK(sch_get_block(s, "S", &b, err));
    SCH_OK(sch_get_loops(s, b, l, &n, err));
    SCH_OK(sch_decompose_reduction(s, b, l[1], &init, err));
    char *src = check_c(sch_func(s), w->func);
    if (t == 0) {
      HAS(src, "float tuned_acc0;\n");
      HAS(src, "tuned_acc0 = S[v_i];\n");
      BEFORE(src, "#pragma omp simd reduction(+:tuned_acc0)\n", "for (int j = 0; j < 1003; ++j) {");
      HAS(src, "tuned_acc0 = tuned_acc0 + tuned_expf(A[v_i * 1003 + v_j] * 0.00999999978f);\n");
      HAS(src, "S[v_i] = tuned_acc0;\n");
    } else if (t == 1) {
      BEFORE(src, "#pragma omp simd reduction(max:tuned_acc0)\n", "for (int j = 0; j < 1003; ++j) {");
      HAS(src, "tuned_acc0 = ((A[v_i * 1003 + v_j]) > tuned_acc0 ? (A[v_i * 1003 + v_j]) : tuned_acc0);\n");
    } else {
      BEFORE(src, "#pragma omp simd reduction(min:tuned_acc0)\n", "for (int j = 0; j < 1003; ++j) {");
      HAS(src, "tuned_acc0 = ((A[v_i * 1003 + v_j] * 2.0f) < tuned_acc0 ? (A[v_i * 1003 + v_j] * 2.0f) : tuned_acc0);\n");
    }
    free(src);
    sch_free(s);
    ir_workload_free(w);
  }
  /* the matmul tile (several elements) stays an array, without the pragma */
  ir_workload_t *w = load_wl("matmul.tw", "M=64,N=48,K=20");
  sch_t *s = tile_promote(w->func, 4, 16);
  char *src = check_c(sch_func(s), w->func);
  HAS(src, "float tuned_acc0[64];");
  LACKS(src, "reduction(");
  free(src);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* A multi-level tiling with spatial loops between its reduction loops:
 * the accumulators are promoted around k_0 when the tile that k_0 spans
 * fits in registers (loaded and stored once per tile, whatever k_1's
 * extent), else around k_1 even when k_1 has only 2 iterations; the global
 * write cache is the (i_2 i_3) x (j_2 j_3) tile, on the stack of each
 * iteration of the parallel loop. */
START_TEST(test_c_promoted_across_reduction_loops) {
  ir_workload_t *w = load_wl("matmul.tw", "M=64,N=48,K=20");
  static const int64_t fi[4] = {2, 2, 2, 8}, fj[4] = {2, 2, 3, 4}, fk[2] = {10, 2};
  sch_t *s = mlt_cpu(w->func, fi, fj, fk);
  char *src = check_c(sch_func(s), w->func);
  HAS(src, "float C_global[192];"); /* 16 x 12 */
  LACKS(src, "malloc(");
  HAS(src, "float tuned_acc0[192];"); /* 2 x 3 x 8 x 4 */
  HAS(src, "tuned_acc0[(((i_2) * 3 + j_2) * 8 + i_3) * 4 + j_3] = tuned_acc0[(((i_2) * 3 + j_2) * 8 + i_3) * 4 + j_3] + ");
  BEFORE(src, "float tuned_acc0[192];", "for (int k_0 = 0; k_0 < 10; ++k_0) {");
  BEFORE(src, "for (int k_0 = 0; k_0 < 10; ++k_0) {", "for (int k_1 = 0; k_1 < 2; ++k_1) {");
  /* loaded once, from the tile rebased to start at 0 and indexed by one flat sum */
  ck_assert_int_eq(count(src, "tuned_acc0[(((i_2) * 3 + j_2) * 8 + i_3) * 4 + j_3] = C_global["), 1);
  HAS(src, "tuned_acc0[(((i_2) * 3 + j_2) * 8 + i_3) * 4 + j_3] = C_global[i_2 * 96 + i_3 * 12 + j_2 * 4 + j_3];");
  free(src);
  sch_free(s);

  static const int64_t gi[4] = {2, 1, 4, 8}, gj[4] = {2, 1, 6, 4};
  s = mlt_cpu(w->func, gi, gj, fk);
  src = check_c(sch_func(s), w->func);
  HAS(src, "float C_global[768];"); /* 32 x 24 */
  HAS(src, "float tuned_acc0[32];"); /* 8 x 4: 32 x 24 is too many registers */
  BEFORE(src, "for (int j_2 = 0; j_2 < 6; ++j_2) {", "float tuned_acc0[32];");
  BEFORE(src, "float tuned_acc0[32];", "for (int k_1 = 0; k_1 < 2; ++k_1) {");
  free(src);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* A temporary that a reduction over loop j updates is live across j's
 * iterations although all its uses are under j: it is allocated above j
 * (a copy per iteration of j would lose the partial sums). */
START_TEST(test_c_temp_carried_by_reduction) {
  ir_workload_t *w = text_wl("param M = 6, N = 40\ninput A: float32[M, N]\ntemp T: float32[M]\n"
                             "output B: float32[M]\nT[i] = sum(j < N: A[i, j])\nB[i] = T[i] * 2.0\n");
  ir_func_t *f = ir_func_copy(w->func);
  ir_buffer_t *A = f->params[0], *B = f->params[1], *T = f->root->u.block.allocs[0];
  ck_assert_str_eq(T->name, "T");
  ir_var_t *i = ir_var_new(f, "i", IR_INT32), *j = ir_var_new(f, "j", IR_INT32);
  ir_var_t *tv[2] = {ir_var_new(f, "v_i", IR_INT32), ir_var_new(f, "v_j", IR_INT32)}, *bv = ir_var_new(f, "w_i", IR_INT32);
  int64_t text[2] = {6, 40}, bext = 6;
  ir_expr_t *tb[2] = {V(f, i), V(f, j)}, *bb = V(f, i), *ti = V(f, tv[0]), *bi = V(f, bv);
  ir_stmt_t *tblk = block(f, "T", 2, tv, text, "SR", tb, ir_store(f, T, &ti, 1, ir_float(f, IR_FLOAT32, 0)),
                          ir_store(f, T, &ti, 1, add(f, ir_load(f, T, &ti, 1), load2(f, A, tv[0], tv[1]))));
  /* B is written at every j: the last write, after the whole sum, stays */
  ir_stmt_t *bblk = block(f, "B", 1, &bv, &bext, "S", &bb, NULL,
                          ir_store(f, B, &bi, 1, ir_bin(f, IR_E_MUL, ir_load(f, T, &bi, 1), ir_float(f, IR_FLOAT32, 2))));
  set_root(f, loop(f, i, 6, IR_LOOP_PARALLEL, NULL, loop(f, j, 40, IR_LOOP_SERIAL, NULL, seq2(f, tblk, bblk))));
  char *src = check_c(f, w->func);
  HAS(src, "for (int i = 0; i < 6; ++i) {\n    float T[1];\n    for (int j = 0; j < 40; ++j) {");
  free(src);
  ir_func_free(f);
  ir_workload_free(w);
}
END_TEST

/* ======================================================================
 * Tests: errors
 * ====================================================================== */

static void lower_fails(const ir_func_t *f, cg_target_t t, const char *entry, int code,
                        const char *text) {
  cg_module_t *m = (cg_module_t *)1;
  tn_err_t err = {0};
  ck_assert_int_eq(cg_lower(f, t, entry, &m, &err), code);
  ck_assert_ptr_null(m);
  ck_assert_msg(strstr(err.msg, text) != NULL, "message \"%s\" lacks \"%s\"", err.msg, text);
}

START_TEST(test_errors) {
  ir_workload_t *w = load_wl("vector_add.tw", "N=256");
  lower_fails(w->func, CG_TARGET_CUDA, NULL, TN_EINVAL,
              "block \"C\" is not bound to blockIdx/threadIdx; bind it or use the c (CPU) target");
  lower_fails(w->func, CG_TARGET_OPENCL, NULL, TN_EINVAL, "block \"C\" is not bound");
  lower_fails(w->func, CG_TARGET_C, "main", TN_EINVAL, "entry name \"main\" is not usable");
  lower_fails(w->func, CG_TARGET_C, "1x", TN_EINVAL, "entry name");
  /* an OpenCL builtin, a POSIX call: names of the reserved table */
  lower_fails(w->func, CG_TARGET_C, "vload4", TN_EINVAL, "entry name \"vload4\" is not usable");
  lower_fails(w->func, CG_TARGET_C, "pipe", TN_EINVAL, "entry name \"pipe\" is not usable");
  lower_fails(w->func, CG_TARGET_C, "free", TN_EINVAL, "a C library function");
  lower_fails(w->func, (cg_target_t)9, NULL, TN_EINVAL, "unknown target");

  /* two loops on threadIdx.x with different extents in one kernel */
  ir_workload_t *s = load_wl("softmax.tw", "M=4,N=64");
  ir_func_t *f = sched_rows(s->func, 4, 64, 32, 1);
  ir_stmt_t *nest = root_item(f, 0)->u.loop.body->u.seq.items[1]; /* E: j_0 -> j_1 */
  nest->u.loop.body->u.loop.extent = 16;
  nest->u.loop.extent = 4;
  lower_fails(f, CG_TARGET_CUDA, NULL, TN_EINVAL, "are both bound to threadIdx.x but have extents 32 and 16");
  ir_func_free(f);

  /* a thread loop without a tag (tags are typed: "warp.x" is not one) */
  ir_thread_tag_t tag;
  ck_assert_int_eq(ir_thread_tag_parse("warp.x", &tag), TN_EINVAL);
  f = bind_outer(w->func, 64);
  root_item(f, 0)->u.loop.tag = IR_TAG_NONE;
  lower_fails(f, CG_TARGET_OPENCL, NULL, TN_EINVAL,
              "is bound to no thread tag (valid: blockIdx.x/y/z, threadIdx.x/y/z, vthread.x/y/z)");
  lower_fails(f, CG_TARGET_C, NULL, TN_EINVAL, "is bound to no thread tag");
  ir_func_free(f);

  /* a reduction across thread blocks */
  ir_workload_t *r = load_wl("row_sum.tw", "M=4,N=64");
  f = sched_rows(r->func, 4, 64, 32, 1);
  ir_stmt_t *j0 = root_item(f, 0)->u.loop.body;
  j0->u.loop.kind = IR_LOOP_THREAD;
  j0->u.loop.tag = IR_TAG_BLOCK_Y;
  lower_fails(f, CG_TARGET_CUDA, NULL, TN_EUNSUPPORTED, "only reductions across threadIdx.x");
  ir_func_free(f);

  /* a shared buffer used by two kernels */
  f = bind_outer(w->func, 64);
  int64_t shape[1] = {256};
  ir_buffer_t *sh = ir_buffer_new(f, "S_shared", IR_FLOAT32, 1, shape, IR_SCOPE_SHARED, IR_BUF_TEMP);
  add_allocs(f, &sh, 1);
  ir_stmt_t *k0 = root_item(f, 0);
  ir_stmt_t *blk = k0->u.loop.body->u.loop.body;
  ir_expr_t *vi = V(f, blk->u.block.iters[0].var);
  ir_expr_t *ld = ir_load(f, sh, &vi, 1);
  blk->u.block.body->u.store.value = add(f, blk->u.block.body->u.store.value, ld);
  ir_stmt_t *blk2 = ir_block_new(f, "W");
  blk2->u.block = blk->u.block;
  blk2->u.block.name = "W";
  blk2->u.block.body = ir_store(f, sh, &vi, 1, ir_float(f, IR_FLOAT32, 1));
  ir_stmt_t *k1 = loop(f, ir_var_new(f, "b", IR_INT32), 4, 0, "blockIdx.x",
                       loop(f, ir_var_new(f, "t", IR_INT32), 64, 0, "threadIdx.x", blk2));
  set_root(f, seq2(f, k1, k0));
  lower_fails(f, CG_TARGET_CUDA, NULL, TN_EINVAL, "which are in different kernels");
  ir_func_free(f);

  /* 16 x 16 virtual threads, each with a 32 x 32 slice of the write
   * cache: 1 MiB of local memory per thread */
  ir_workload_t *mm = load_wl("matmul.tw", "M=2048,N=2048,K=64");
  static const int64_t huge[4] = {1, 16, 4, 0};
  sch_t *sc = mlt_cuda_tiles(mm->func, huge, 1);
  lower_fails(sch_func(sc), CG_TARGET_CUDA, NULL, TN_EINVAL,
              "local buffer \"C_local\" needs 1048576 bytes per thread (one slice per virtual thread); "
              "a GPU thread has less than 512 KiB of local memory");
  sch_free(sc);

  /* software pipelining where it does not fit */
  ir_workload_t *m64 = load_wl("matmul.tw", "M=64,N=64,K=64");
  f = sched_matmul_gpu(m64->func);
  ir_loop_t *kl = &matmul_gpu_k_loop(f)->u.loop;
  ir_annot_set_int(f, &kl->annots, &kl->nannots, IR_ANN_PIPELINE_STAGES, 9);
  lower_fails(f, CG_TARGET_CUDA, NULL, TN_EINVAL, "loop k_0: software_pipeline_stages must be an integer from 1 to 8");
  ir_annot_set_int(f, &kl->annots, &kl->nannots, IR_ANN_PIPELINE_STAGES, 2);
  ir_stmt_t **kitems = kl->body->u.seq.items;
  ir_stmt_t *fetch0 = kitems[0];
  kitems[0] = kitems[2]; /* the products first */
  kitems[2] = fetch0;
  lower_fails(f, CG_TARGET_CUDA, NULL, TN_EUNSUPPORTED,
              "loop k_0 is annotated software_pipeline_stages = 2, but its body does not begin with copies "
              "into shared memory");
  kitems[2] = kitems[0];
  kitems[0] = fetch0;
  kl->body->u.seq.n = 2; /* only the copies */
  lower_fails(f, CG_TARGET_OPENCL, NULL, TN_EUNSUPPORTED, "its body has no computation after the copies");
  ir_loop_t *tx = &root_item(f, 0)->u.loop.body->u.loop.body->u.loop.body->u.loop;
  ir_annot_set_int(f, &tx->annots, &tx->nannots, IR_ANN_PIPELINE_STAGES, 2);
  lower_fails(f, CG_TARGET_CUDA, NULL, TN_EINVAL, "loop j_1 is annotated software_pipeline_stages but is not a serial loop");
  ir_func_free(f);
  ir_workload_free(m64);
  ir_workload_free(mm);
  ir_workload_free(r);
  ir_workload_free(s);
  ir_workload_free(w);
}
END_TEST

START_TEST(test_names_and_targets) {
  cg_target_t t;
  ck_assert_int_eq(cg_target_parse("cuda", &t), 0);
  ck_assert_int_eq(t, CG_TARGET_CUDA);
  ck_assert_int_eq(cg_target_parse("cpu", &t), 0);
  ck_assert_int_eq(t, CG_TARGET_C);
  ck_assert_int_eq(cg_target_parse("vulkan", &t), TN_EINVAL);
  ck_assert_str_eq(cg_target_name(CG_TARGET_OPENCL), "opencl");
  /* names that clash with what the generated code uses get suffixes */
  ir_workload_t *w = text_wl("param N = 8\ninput exp_: float32[N]\ninput malloc: float32[N]\n"
                             "output free: float32[N]\nfree[i] = exp(malloc[i]) + exp_[i]\n");
  char *src = check_c(w->func, w->func);
  HAS(src, "float *restrict malloc_1");
  HAS(src, "free_1[v_i] = tuned_expf(malloc_1[v_i]) + exp_[v_i];");
  free(src);
  ir_workload_free(w);
  /* macro-like names (a header of C, CUDA or OpenCL may define them) get
   * "x_"; C library macros get suffixes; each still compiles and computes
   * right in C, OpenCL (PoCL) and CUDA (NVRTC and the host harness) */
  w = text_wl("param N = 64\ninput M_PI: float32[N]\ninput HUGE_VAL: float32[N]\ninput errno: float32[N]\n"
              "input FLT_MAX: float32[N]\ninput isnan: float32[N]\noutput INT_MAX: float32[N]\n"
              "INT_MAX[i] = M_PI[i] + HUGE_VAL[i] * errno[i] - FLT_MAX[i] * isnan[i]\n");
  src = check_c(w->func, w->func);
  HAS(src, "x_INT_MAX[v_i] = x_M_PI[v_i] + x_HUGE_VAL[v_i] * errno_1[v_i] - x_FLT_MAX[v_i] * isnan_1[v_i];");
  free(src);
  ir_func_t *g = bind_outer(w->func, 32);
  gpu_out_t o = check_gpu(g, w->func);
  HAS(o.cuda, "float *__restrict__ x_M_PI");
  HAS(o.opencl, "x_FLT_MAX");
  gpu_out_free(&o);
  ir_func_free(g);
  ir_workload_free(w);
  /* entry points: not a C library name, not macro-like */
  ck_assert(cg_entry_usable("matmul"));
  ck_assert(!cg_entry_usable("exit"));
  ck_assert(!cg_entry_usable("sinf"));
  ck_assert(!cg_entry_usable("errno"));
  ck_assert(!cg_entry_usable("M_PI"));
  ck_assert(!cg_entry_usable("_kernel"));
  w = text_wl("param N = 8\ninput A: float32[N]\noutput B: float32[N]\nB[i] = A[i]\n");
  cg_module_t *m = NULL;
  tn_err_t err = {0};
  ck_assert_int_eq(cg_lower(w->func, CG_TARGET_C, "exit", &m, &err), TN_EINVAL);
  ck_assert_msg(strstr(err.msg, "entry name \"exit\" is not usable") && strstr(err.msg, "C library"), "%s", err.msg);
  /* two exported kernels with different entries link into one program:
   * each wrapper is named after its entry (both were tuned_entry) */
  char dir[] = "/tmp/tuned-cg-link-XXXXXX", cmd[1024], so[96];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  const char *entries[2] = {"first", "second"};
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(cg_lower(w->func, CG_TARGET_C, entries[i], &m, &err), TN_OK);
    char path[96];
    snprintf(path, sizeof path, "%s/%s.c", dir, entries[i]);
    write_file(path, m->source);
    cg_module_free(m);
  }
  snprintf(so, sizeof so, "%s/both.so", dir);
  snprintf(cmd, sizeof cmd, "cc -O1 -fopenmp -shared -fPIC -o %s %s/first.c %s/second.c -lm 2>%s/log", so, dir, dir,
           dir);
  ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  ck_assert_msg(h, "%s", dlerror());
  entry_fn f1 = (entry_fn)dlsym(h, "tuned_entry_first"), f2 = (entry_fn)dlsym(h, "tuned_entry_second");
  ck_assert(f1 && f2 && (void *)f1 != (void *)f2);
  float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8] = {0};
  void *args[2] = {a, b};
  ck_assert_int_eq(f2(args), 0);
  ck_assert(b[7] == 8.0f);
  dlclose(h);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ck_assert_int_eq(system(cmd), 0);
  ir_workload_free(w);
}
END_TEST

/* ---- vectorisable exp and tanh --------------------------------------------------- */

/* A division by what the loop does not change (softmax's row sum) prints
 * as a product with its reciprocal, computed before the loop in a scope
 * that binds the block's iterators; a divisor that changes with the loop
 * (1 / A[i, j]) or one read from the buffer the loop writes stays a
 * division.  The outputs match the evaluator's. */
START_TEST(test_c_invariant_divisor) {
  ir_workload_t *w = text_wl("param M = 7, N = 33\ninput A: float32[M, N]\ninput D: float32[M]\n"
                             "output Y: float32[M, N]\nY[i, j] = A[i, j] / (D[i] * D[i] + 1.0) + 1.0 / (A[i, j] + 9.0)\n");
  char *src = check_c(w->func, w->func);
  HAS(src, "tuned_rcp0 = 1.0f / (D[v_i] * D[v_i] + 1.0f);");
  HAS(src, "Y[v_i * 33 + v_j] = A[v_i * 33 + v_j] * tuned_rcp0 + 1.0f / (A[v_i * 33 + v_j] + 9.0f);");
  ck_assert_int_eq(count(src, "tuned_rcp"), 3); /* declared, computed, used */
  free(src);
  ir_workload_free(w);
  /* the divisor changes with j: no reciprocal */
  w = text_wl("param M = 5, N = 9\ninput A: float32[M, N]\noutput Y: float32[M, N]\nY[i, j] = 2.0 / A[j % M, i]\n");
  src = check_c(w->func, w->func);
  ck_assert_int_eq(count(src, "tuned_rcp"), 0);
  free(src);
  ir_workload_free(w);
}
END_TEST

/* A producer loop printed inside the loop after it that reads, at each
 * iteration, just what that iteration of the producer wrote (fuse.c):
 * softmax's exponentials inside the row sum's simd loop, as the CPU search's
 * best schedule has them, and in a hand-built row loop; a consumer reading
 * another element than the one its iteration produced keeps its own loop.
 * The outputs match the evaluator's. */
START_TEST(test_c_fused_producer) {
  ir_workload_t *w = load_wl("softmax.tw", "M=6,N=100");
  sch_t *s = replay_file(w->func, "bench/cpu/results/2026-11-27-s10-softmax-t64.trace.json");
  char *src = check_c(sch_func(s), w->func);
  HAS(src, "#pragma omp simd reduction(+:tuned_acc1)\n"
           "        for (int ax1_2 = 0; ax1_2 < 100; ++ax1_2) {\n"
           "          {  /* loop ax1_1, fused: its iteration ax1_2 runs here */\n"
           "            int ax0_1 = 0;\n"
           "            int ax1_1 = ax1_2;\n"
           "            {  /* block E */");
  ck_assert_int_eq(count(src, "block E "), 1);
  ck_assert_int_eq(count(src, "for (int ax1_1 "), 0);
  free(src);
  sch_free(s);
  ir_workload_free(w);

  /* in one row loop: T's loop, B's reading T[i, j] (T's loop runs in it),
   * C's reading T[i, N - 1 - j] and B (C's loop stays: one pending at a time,
   * and its T index is not the loop's) */
  w = text_wl("param M = 3, N = 37\ninput A: float32[M, N]\ntemp T: float32[M, N]\noutput B: float32[M, N]\n"
              "output C: float32[M, N]\nT[i, j] = exp(A[i, j]) + 1.0\nB[i, j] = T[i, j] * T[i, j]\n"
              "C[i, j] = T[i, N - 1 - j] + B[i, j]\n");
  ir_func_t *f = ir_func_copy(w->func);
  ir_buffer_t *A = f->params[0], *B = f->params[1], *C = f->params[2], *T = f->root->u.block.allocs[0];
  ck_assert_str_eq(T->name, "T");
  ir_var_t *i = ir_var_new(f, "i", IR_INT32), *j[3], *vi[3], *vj[3];
  ir_stmt_t *nest[3];
  for (int k = 0; k < 3; k++) {
    j[k] = ir_var_new(f, "j", IR_INT32), vi[k] = ir_var_new(f, "v_i", IR_INT32), vj[k] = ir_var_new(f, "v_j", IR_INT32);
    ir_var_t *vs[2] = {vi[k], vj[k]};
    int64_t ext[2] = {3, 37};
    ir_expr_t *bind[2] = {V(f, i), V(f, j[k])}, *idx[2] = {V(f, vi[k]), V(f, vj[k])};
    ir_expr_t *rev[2] = {V(f, vi[k]), ir_bin(f, IR_E_SUB, ir_int(f, 36), V(f, vj[k]))};
    ir_stmt_t *st = k == 0 ? ir_store(f, T, idx, 2, add(f, ir_call(f, IR_FN_EXP, (ir_expr_t *[]){load2(f, A, vi[0], vj[0])}, 1),
                                                         ir_float(f, IR_FLOAT32, 1)))
                    : k == 1 ? ir_store(f, B, idx, 2, ir_bin(f, IR_E_MUL, load2(f, T, vi[1], vj[1]), load2(f, T, vi[1], vj[1])))
                             : ir_store(f, C, idx, 2, add(f, ir_load(f, T, rev, 2), load2(f, B, vi[2], vj[2])));
    nest[k] = loop(f, j[k], 37, IR_LOOP_SERIAL, NULL, block(f, k == 0 ? "T" : k == 1 ? "B" : "C", 2, vs, ext, "SS", bind, NULL, st));
  }
  set_root(f, loop(f, i, 3, IR_LOOP_PARALLEL, NULL, ir_seq(f, nest, 3)));
  src = check_c(f, w->func);
  ck_assert_int_eq(count(src, ", fused: its iteration"), 1);
  HAS(src, "for (int j_1 = 0; j_1 < 37; ++j_1) {\n      {  /* loop j, fused: its iteration j_1 runs here */\n"
           "        int j = j_1;\n        {  /* block T */");
  ck_assert_int_eq(count(src, "for (int j_2 = 0; j_2 < 37; ++j_2)"), 1);
  free(src);
  ir_func_free(f);
  ir_workload_free(w);

  /* a block between them writes what T's loop reads (K, bumped every row):
   * T's loop stays where it is; the outputs match the evaluator's run of
   * the same function */
  w = text_wl("param M = 3, N = 37\ninput A: float32[M, N]\ntemp K: float32[1]\ntemp T: float32[M, N]\n"
              "output B: float32[M, N]\nK[z] = 1.0\nT[i, j] = A[i, j] + K[0]\nB[i, j] = T[i, j] * 2.0\n");
  f = ir_func_copy(w->func);
  A = f->params[0], B = f->params[1];
  ir_buffer_t *K = f->root->u.block.allocs[0];
  T = f->root->u.block.allocs[1];
  ck_assert_str_eq(K->name, "K");
  i = ir_var_new(f, "i", IR_INT32);
  ir_var_t *z = ir_var_new(f, "z", IR_INT32), *vz = ir_var_new(f, "v_z", IR_INT32);
  int64_t one = 1, ext[2] = {3, 37};
  ir_expr_t *zero = ir_int(f, 0), *bz = V(f, z);
  ir_stmt_t *kinit = loop(f, z, 1, IR_LOOP_SERIAL, NULL,
                          block(f, "K", 1, &vz, &one, "S", &bz, NULL, ir_store(f, K, &zero, 1, ir_float(f, IR_FLOAT32, 1))));
  ir_stmt_t *bump = block(f, "bump", 0, NULL, NULL, "", NULL, NULL,
                          ir_store(f, K, &zero, 1, add(f, ir_load(f, K, &zero, 1), ir_float(f, IR_FLOAT32, 1))));
  for (int k = 0; k < 2; k++) {
    j[k] = ir_var_new(f, "j", IR_INT32), vi[k] = ir_var_new(f, "v_i", IR_INT32), vj[k] = ir_var_new(f, "v_j", IR_INT32);
    ir_var_t *vs[2] = {vi[k], vj[k]};
    ir_expr_t *bind[2] = {V(f, i), V(f, j[k])}, *idx[2] = {V(f, vi[k]), V(f, vj[k])};
    ir_stmt_t *st = k == 0 ? ir_store(f, T, idx, 2, add(f, load2(f, A, vi[0], vj[0]), ir_load(f, K, &zero, 1)))
                           : ir_store(f, B, idx, 2, ir_bin(f, IR_E_MUL, load2(f, T, vi[1], vj[1]), ir_float(f, IR_FLOAT32, 2)));
    nest[k] = loop(f, j[k], 37, IR_LOOP_SERIAL, NULL, block(f, k ? "B" : "T", 2, vs, ext, "SS", bind, NULL, st));
  }
  ir_stmt_t *row = ir_seq(f, (ir_stmt_t *[]){nest[0], seq2(f, bump, nest[1])}, 2);
  set_root(f, seq2(f, kinit, loop(f, i, 3, IR_LOOP_SERIAL, NULL, row)));
  src = check_c(f, f);
  LACKS(src, "fused");
  free(src);
  ir_func_free(f);
  ir_workload_free(w);
}
END_TEST

/* A small tile that one loop alone reduces, contiguous in what it loads:
 * one scalar accumulator per element and the loop an omp simd reduction
 * over all of them (promote.c, lanes): gemv's best schedule of the CPU
 * suite, 8 rows against a run of x.  The matmul tile of
 * test_c_promoted_accumulators, whose k loop strides through B, keeps its
 * array.  The outputs match the evaluator's. */
START_TEST(test_c_lane_accumulators) {
  ir_workload_t *w = load_wl("gemv.tw", "M=48,N=40");
  sch_t *s = replay_file(w->func, "bench/cpu/results/2026-11-27-s11-gemv-t64.trace.json");
  char *src = check_c(sch_func(s), w->func);
  HAS(src, "float tuned_acc0_0, tuned_acc0_1, tuned_acc0_2, tuned_acc0_3, tuned_acc0_4, tuned_acc0_5, "
           "tuned_acc0_6, tuned_acc0_7;");
  HAS(src, "#pragma omp simd reduction(+:tuned_acc0_0, tuned_acc0_1, tuned_acc0_2, tuned_acc0_3, tuned_acc0_4, "
           "tuned_acc0_5, tuned_acc0_6, tuned_acc0_7)\n        for (int j_0 = 0; j_0 < 40; ++j_0) {");
  HAS(src, "int i_3 = 3;\n                {  /* block y_update */");
  HAS(src, "tuned_acc0_7 = tuned_acc0_7 + A[v_i * 40 + v_j] * x[v_j];");
  LACKS(src, "tuned_acc0[");
  ck_assert_int_eq(count(src, "y_global[i_1 * 8 + i_2 * 4 + i_3] = tuned_acc0_"), 8);
  free(src);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

typedef void (*sweep_fn)(const float *x, float *e, float *t, long n);

static double ulp_of(double y) {
  float f = fabsf((float)y);
  return (double)nextafterf(f, INFINITY) - f;
}

/* The C target's expf/tanhf (module.c): the kernel calls them and no libm
 * function, its output matches the reference, and over a sample of every
 * float they are within 1 / 1.5 ulp of exp/tanh in double (measured over all
 * 2^32 floats: 0.90 and 1.37), with inf, NaN, zeros and underflow right. */
START_TEST(test_c_vector_math) {
  ir_workload_t *w = text_wl("param N = 1031\ninput A: float32[N]\noutput Y: float32[N]\n"
                             "Y[i] = 0.25 * exp(A[i]) + tanh(3.0 * A[i])\n");
  char *src = check_c(w->func, w->func);
  HAS(src, "Y[v_i] = 0.25f * tuned_expf(A[v_i]) + tuned_tanhf(3.0f * A[v_i]);");
  ck_assert_int_eq(count(src, "static inline float tuned_expf(float x) {"), 1);
  ck_assert_int_eq(count(src, "static inline float tuned_tanhf(float x) {"), 1);
  ck_assert_int_eq(count(src, "expf("), count(src, "tuned_expf("));
  ck_assert_int_eq(count(src, "tanhf("), count(src, "tuned_tanhf("));
  /* the same helpers, built as the cc builder builds them, swept */
  char dir[] = "/tmp/tuned-vm-XXXXXX", path[128], so[128], cmd[640];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/k.c", dir);
  snprintf(so, sizeof so, "%s/k.so", dir);
  tn_buf_t b;
  tn_buf_init(&b);
  tn_buf_printf(&b, "%s\nvoid sweep(const float *x, float *e, float *t, long n) {\n"
                    "  for (long i = 0; i < n; i++) e[i] = tuned_expf(x[i]), t[i] = tuned_tanhf(x[i]);\n}\n", src);
  write_file(path, tn_buf_str(&b));
  tn_buf_free(&b);
  snprintf(cmd, sizeof cmd, "cc -O3 -march=native -fopenmp -shared -fPIC -o %s %s -lm", so, path);
  ck_assert_int_eq(system(cmd), 0);
  snprintf(cmd, sizeof cmd, "nm -D --undefined-only %s | grep -Eqw 'expf|tanhf|exp|tanh'", so);
  ck_assert_msg(system(cmd) != 0, "the kernel calls libm's exp or tanh");
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  ck_assert_msg(h != NULL, "dlopen: %s", dlerror());
  sweep_fn fn = (sweep_fn)dlsym(h, "sweep");
  ck_assert_ptr_nonnull(fn);
  static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 88.7f, 88.73f, 89.0f, 200.0f, -87.3f,
                                  -100.0f, -103.9f, -104.0f, -120.0f, 0.625f, -0.625f, 1e-30f, -1e-30f, 1e-3f, 9.0f};
  long ns = (long)TN_ARRAY_LEN(special), step = 1021, n = ns + (long)(0x100000000LL / step) + 1;
  float *x = tn_xmalloc(sizeof(float) * (size_t)n * 3), *e = x + n, *t = x + 2 * n;
  memcpy(x, special, sizeof special);
  for (long i = ns; i < n; i++) {
    uint32_t u = (uint32_t)((i - ns) * step);
    memcpy(&x[i], &u, 4);
  }
  fn(x, e, t, n);
  double worst_e = 0, worst_t = 0;
  for (long i = 0; i < n; i++) {
    double xe = exp((double)x[i]), xt = tanh((double)x[i]);
    if (isnan(x[i])) {
      ck_assert_msg(isnan(e[i]) && isnan(t[i]), "NaN in, %g and %g out", e[i], t[i]);
      continue;
    }
    if (xe > FLT_MAX) ck_assert_msg(isinf(e[i]), "expf(%a) = %a, expected inf", x[i], e[i]);
    else if (xe < FLT_MIN) ck_assert_msg(e[i] >= 0 && e[i] <= 2 * FLT_MIN, "expf(%a) = %a", x[i], e[i]);
    else worst_e = fmax(worst_e, fabs(e[i] - xe) / ulp_of(xe));
    if (fabs(xt) < FLT_MIN) ck_assert_msg(t[i] == x[i], "tanhf(%a) = %a", x[i], t[i]);
    else worst_t = fmax(worst_t, fabs(t[i] - xt) / ulp_of(xt));
  }
  ck_assert_msg(worst_e <= 1.0, "expf: %.3f ulp", worst_e);
  ck_assert_msg(worst_t <= 1.5, "tanhf: %.3f ulp", worst_t);
  ck_assert_msg(signbit(t[1]) && t[1] == 0 && t[2] == 1 && t[3] == -1 && e[2] == INFINITY && e[3] == 0,
                "tanhf(-0) = %a, tanhf(inf) = %a, tanhf(-inf) = %a, expf(inf) = %a, expf(-inf) = %a", t[1], t[2], t[3],
                e[2], e[3]);
  free(x);
  dlclose(h);
  rm_tree(dir);
  free(src);
  ir_workload_free(w);
}
END_TEST

/* ---- tensor intrinsics ---------------------------------------------------------- */


/* matmul (or batch matmul: `batch` leading loops) tiled for an MR x NR
 * intrinsic with uneven splits (i by mr, j by nr, k by kc), the reduction
 * decomposed and the k1 i1 j1 nest tensorized; `gpu` binds j0 and i0. */
static ir_func_t *sched_matmul_intrin(const ir_func_t *orig, int batch, const char *intrin, int mr, int nr, int kc,
                                      bool gpu, int pack) {
  sch_t *s = sch_create(orig, 1);
  sch_rv_t b, l[8], ip[2], jp[2], kp[2], init;
  int nl = 0;
  SCH_OK(sch_get_block(s, "C", &b, err));
  SCH_OK(sch_get_loops(s, b, l, &nl, err));
  sch_arg_t fi[2] = {sch_arg_none(), sch_arg_int(mr)}, fj[2] = {sch_arg_none(), sch_arg_int(nr)},
            fk[2] = {sch_arg_none(), sch_arg_int(kc)};
  SCH_OK(sch_split(s, l[batch], fi, 2, ip, err));
  SCH_OK(sch_split(s, l[batch + 1], fj, 2, jp, err));
  SCH_OK(sch_split(s, l[batch + 2], fk, 2, kp, err));
  sch_rv_t order[6] = {jp[0], ip[0], kp[0], kp[1], ip[1], jp[1]};
  SCH_OK(sch_reorder(s, order, 6, err));
  if (gpu) {
    SCH_OK(sch_bind(s, jp[0], "blockIdx.x", err));
    SCH_OK(sch_bind(s, ip[0], "threadIdx.x", err));
  }
  if (pack) { /* B's panel copied under k0 (pack 1) or B whole, once, outside the kernel (pack 2: hoisted), rows
               padded to 64 n + 16 floats */
    sch_rv_t cache;
    SCH_OK(sch_cache_read(s, b, 1, "local", &cache, err));
    if (pack == 1) SCH_OK(sch_compute_at(s, cache, kp[0], true, err));
    const ir_buffer_t *bb = orig->params[1];
    if (bb->ndim == batch + 2 && bb->shape[batch] != orig->params[0]->shape[batch + 1]) { /* B[.., N, K]: transpose */
      int perm[3] = {0, 1, 2};
      perm[batch] = batch + 1, perm[batch + 1] = batch;
      SCH_OK(sch_transform_layout(s, cache, 0, true, perm, batch + 2, err));
    }
    SCH_OK(sch_storage_align(s, cache, 0, batch, 64, 16, err));
    if (pack == 2) SCH_OK(sch_hoist_packing(s, cache, err));
  }
  SCH_OK(sch_decompose_reduction(s, b, kp[0], &init, err));
  SCH_OK(sch_tensorize(s, kp[1], intrin, err));
  ir_func_t *f = ir_func_copy(sch_func(s));
  sch_free(s);
  return f;
}

START_TEST(test_c_tensor_intrinsics) {
  static const struct {
    const char *wl, *sets, *intrin;
    int batch, mr, nr, kc;
    int pack; /* 0 B read in place, 1 packed under k0, 2 packed once outside the kernel (B const) */
    const char *text; /* in the source */
  } cases[] = {
      {"matmul.tw", "M=48,N=32,K=40", "f32_fma_6x16_avx2", 0, 6, 16, 8, 0, "A + ("},  /* whole tiles */
      {"matmul.tw", "M=61,N=37,K=29", "f32_fma_6x16_avx2", 0, 6, 16, 8, 0, "tuned_min_i32(6, "}, /* tails of i, j, k */
      {"matmul.tw", "M=7,N=50,K=3", "f32_fma_4x24_avx2", 0, 4, 24, 16, 0, "tuned_min_i32(4, "}, /* k < its tile */
      {"matmul.tw", "M=20,N=16,K=9", "f32_fma_8x8_avx2", 0, 8, 8, 9, 0, "C + ("},
      {"batch_matmul.tw", "BATCH=3,M=10,N=33,K=17", "f32_fma_2x32_avx2", 1, 2, 32, 5, 0, "B + ("},
      /* B packed: a panel of KC x NR floats per tile; rows of 32 floats padded to 80 (64 n + 16) */
      {"matmul.tw", "M=61,N=37,K=29", "f32_fma_6x16_avx2", 0, 6, 16, 8, 1, "float B_local[128];"},
      {"batch_matmul.tw", "BATCH=2,M=12,N=40,K=9", "f32_fma_2x32_avx2", 1, 2, 32, 4, 1, "ax1 * 80 + ax2]"},
      /* B transposed (N x K), packed as K x N */
      {"matmul_bt.tw", "M=23,N=45,K=19", "f32_fma_6x16_avx2", 0, 6, 16, 8, 1, "B_local + ("},
      /* B const (weights): packed whole, transposed, by a function of its own; rows of 45 padded to 80 */
      {"matmul_bt.tw", "M=23,N=45,K=19", "f32_fma_6x16_avx2", 0, 6, 16, 8, 2,
       "int kern_pack_B(const float *restrict B, float *restrict B_local) {"},
      {"matmul.tw", "M=13,N=40,K=11", "f32_fma_6x16_avx2", 0, 6, 16, 8, 2,
       "int tuned_pack_kern(void **args) {\n  int rc = 0;\n  if (!rc) rc = kern_pack_B((const float *)args[1], (float *)args[3]);"},
      /* AVX-512 (skipped where the host has none) */
      {"matmul.tw", "M=36,N=64,K=20", "f32_fma_12x32_avx512", 0, 12, 32, 8, 0, "_mm512_fmadd_ps("},
      {"matmul.tw", "M=29,N=70,K=13", "f32_fma_6x64_avx512", 0, 6, 64, 8, 1, "B_local[ax0 * 80 + ax1]"},
      {"batch_matmul.tw", "BATCH=2,M=9,N=31,K=5", "f32_fma_8x32_avx512", 1, 8, 32, 4, 0, "_mm512_maskz_loadu_ps("},
      {"matmul.tw", "M=5,N=100,K=7", "f32_fma_4x64_avx512", 0, 4, 64, 16, 0, "tuned_min_i32(4, "},
  };
  const ir_intrin_t *any = ir_intrin_find("f32_fma_6x16_avx2");
  ck_assert_ptr_nonnull(any);
  if (!ir_intrin_host_supports(any)) {
    fprintf(stderr, "test_c_tensor_intrinsics: skipped, this CPU has no AVX2+FMA\n");
    return;
  }
  for (size_t i = 0; i < TN_ARRAY_LEN(cases); i++) {
    if (!ir_intrin_host_supports(ir_intrin_find(cases[i].intrin))) {
      fprintf(stderr, "test_c_tensor_intrinsics: %s skipped, this CPU lacks %s\n", cases[i].intrin,
              ir_intrin_find(cases[i].intrin)->features);
      continue;
    }
    ir_workload_t *w = load_wl(cases[i].wl, cases[i].sets);
    if (cases[i].pack == 2) w->func->params[1]->is_const = true; /* as `input B: ... const` declares it */
    ir_func_t *f = sched_matmul_intrin(w->func, cases[i].batch, cases[i].intrin, cases[i].mr, cases[i].nr, cases[i].kc,
                                       false, cases[i].pack);
    char *src = check_c(f, w->func);
    char call[96];
    snprintf(call, sizeof call, "tuned_intrin_%s(", cases[i].intrin);
    ck_assert_int_eq(count(src, call), 2); /* the definition and the one call */
    HAS(src, "#include <immintrin.h>\n");
    HAS(src, ir_intrin_find(cases[i].intrin)->lanes == 16 ? "_mm512_fmadd_ps(" : "_mm256_fmadd_ps(");
    HAS(src, cases[i].text);
    free(src);
    ir_func_free(f);
    ir_workload_free(w);
  }
}
END_TEST

START_TEST(test_gpu_tensor_intrinsic_refused) {
  ir_workload_t *w = load_wl("matmul.tw", "M=12,N=16,K=8");
  ir_func_t *f = sched_matmul_intrin(w->func, 0, "f32_fma_6x16_avx2", 6, 16, 8, true, false);
  cg_module_t *m = NULL;
  tn_err_t err = {0};
  ck_assert_int_ne(cg_lower(f, CG_TARGET_OPENCL, "kern", &m, &err), 0);
  ck_assert_msg(strstr(err.msg, "intrinsic f32_fma_6x16_avx2 has no implementation in opencl code"), "%s", err.msg);
  ir_func_free(f);
  /* nor a hoisted packing (the C target only) */
  w->func->params[1]->is_const = true;
  f = sched_matmul_intrin(w->func, 0, "f32_fma_6x16_avx2", 6, 16, 8, true, 2);
  ck_assert_int_ne(cg_lower(f, CG_TARGET_CUDA, "kern", &m, &err), 0);
  ck_assert_msg(strstr(err.msg, "block \"B_local\": hoisted packing is supported on the C target only"), "%s", err.msg);
  ir_func_free(f);
  ir_workload_free(w);
}
END_TEST

/* Tensor cores (wmma_sched.h: 32 x 64 per thread block, 2 x 2 warps of
 * 16 x 32, K in steps of the intrinsic's): matmul_f16 and matmul_bf16 64 x 64
 * x 64 lowered to nvcuda::wmma, compiled by NVRTC for sm_80 and sm_90 (PTX
 * with wmma.mma.sync) and run on the cuda-host harness, whose warps compute
 * every tile once, checked against the reference evaluator. */
START_TEST(test_gpu_wmma) {
  static const struct {
    const char *wl, *intrin, *ptx, *type;
  } cases[] = {
      {"matmul_f16.tw", "wmma_f16_f32_16x16x16", "wmma.mma.sync.aligned.row.row.m16n16k16.f32.f32", "__half"},
      {"matmul_bf16.tw", "wmma_bf16_f32_16x16x16", "wmma.mma.sync.aligned.row.row.m16n16k16.f32.bf16.bf16.f32",
       "__nv_bfloat16"},
  };
  for (size_t i = 0; i < TN_ARRAY_LEN(cases); i++) {
    ir_workload_t *w = load_wl(cases[i].wl, "M=64,N=64,K=64");
    sch_t *s = ws_tensorized(w->func, "Acc", "C", cases[i].intrin, 16);
    cg_module_t *m = lower_ok(sch_func(s), CG_TARGET_CUDA);
    const char *src = m->source;
    HAS(src, "#include <mma.h>");
    HAS(src, "nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> Acc_local[2];");
    char want[256];
    snprintf(want, sizeof want, "nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, %s, nvcuda::wmma::row_major> tuned_wa;",
             cases[i].type);
    HAS(src, want);
    /* A_shared rows of 16 padded to 40 (32 n + 8), B_shared's of 64 to 72; 32-byte aligned */
    HAS(src, "nvcuda::wmma::load_matrix_sync(tuned_wa, A_shared + (");
    HAS(src, "), 40);");
    HAS(src, "), 72);");
    HAS(src, "__shared__ __align__(32) ");
    HAS(src, "nvcuda::wmma::fill_fragment(Acc_local[");
    HAS(src, "nvcuda::wmma::mma_sync(Acc_local[");
    HAS(src, "nvcuda::wmma::store_matrix_sync(Acc + (");
    HAS(src, ", 64, nvcuda::wmma::mem_row_major);");
    ck_assert_int_eq(m->min_sm, i == 0 ? 70 : 80);
    ck_assert_int_eq(m->nkernels, 2);
    ck_assert_int_eq(m->kernels[0].block[0], 32); /* the lanes */
    ck_assert_int_eq(m->kernels[0].block[1], 4);  /* the warps */
    ck_assert_int_eq(m->kernels[0].grid[0], 2);
#if CG_TEST_NVRTC
    for (int a = 0; a < 2; a++) {
      char *ptx = nvrtc_ptx(src, a ? "sm_90" : "sm_80");
      ck_assert_msg(strstr(ptx, cases[i].ptx), "%s: no %s in the PTX", cases[i].intrin, cases[i].ptx);
      ck_assert_msg(strstr(ptx, "wmma.load.a.sync") && strstr(ptx, "wmma.store.d.sync"), "%s", ptx);
      free(ptx);
    }
#endif
    run_cuda_host(w->func, m);
    cg_module_free(m);
    sch_free(s);
    ir_workload_free(w);
  }
}
END_TEST

/* Software pipelining of the shared-memory stages in front of the tensor
 * cores: the copies run 1 or 2 steps of K ahead into 2 or 3 buffers, the
 * warps' loads read the step's buffer (still 32-byte aligned).  The float16
 * copies are plain stores (pipeline.c makes cp.async of float32 only so
 * far); the commit groups and waits are there. */
START_TEST(test_gpu_wmma_pipelined) {
  ir_workload_t *w = load_wl("matmul_f16.tw", "M=64,N=64,K=64");
  for (int stages = 2; stages <= 3; stages++) {
    wmma_sched_t ws = ws_schedule(w->func, "Acc", "C", 16);
    SCH_OK(sch_annotate(ws.s, ws.k0, IR_ANN_PIPELINE_STAGES, sch_arg_int(stages), err));
    ws_tensorize(&ws, "wmma_f16_f32_16x16x16");
    cg_module_t *m = lower_ok(sch_func(ws.s), CG_TARGET_CUDA);
    char want[64];
    snprintf(want, sizeof want, "tuned_cp_wait<%d>();", stages - 2);
    HAS(m->source, want);
    HAS(m->source, "nvcuda::wmma::load_matrix_sync(tuned_wa, A_shared + (");
    snprintf(want, sizeof want, "__half A_shared[%d];", 32 * 40 * stages);
    HAS(m->source, want);
#if CG_TEST_NVRTC
    char *ptx = nvrtc_ptx(m->source, "sm_80");
    ck_assert_msg(strstr(ptx, "cp.async.wait_group") && strstr(ptx, "wmma.mma.sync"), "%s", ptx);
    free(ptx);
#endif
    run_cuda_host(w->func, m);
    cg_module_free(m);
    sch_free(ws.s);
  }
  ir_workload_free(w);
}
END_TEST

/* float16 tiles copied 4 and 8 halves at a time: 8 and 16 bytes at once, by
 * cp.async in a pipeline (sm_80+), else by one float2/float4 load and store. */
START_TEST(test_gpu_wmma_vector_copies) {
  ir_workload_t *w = load_wl("matmul_f16.tw", "M=64,N=64,K=64");
  for (int stages = 1; stages <= 2; stages++) {
    wmma_sched_t ws = ws_schedule_lanes(w->func, "Acc", "C", 16, 4, 8); /* A: 32 x 16, B: 16 x 64 per step */
    if (stages > 1) SCH_OK(sch_annotate(ws.s, ws.k0, IR_ANN_PIPELINE_STAGES, sch_arg_int(stages), err));
    ws_tensorize(&ws, "wmma_f16_f32_16x16x16");
    cg_module_t *m = lower_ok(sch_func(ws.s), CG_TARGET_CUDA);
    if (stages > 1) {
      HAS(m->source, "tuned_cp_async8(A_shared + (");
      HAS(m->source, "tuned_cp_async16(B_shared + (");
    } else {
      HAS(m->source, "*(float2 *)(A_shared + (");
      HAS(m->source, "*(float4 *)(B_shared + (");
      HAS(m->source, "/* vectorized loop ");
    }
#if CG_TEST_NVRTC
    char *ptx = nvrtc_ptx(m->source, "sm_80");
    if (stages > 1) ck_assert_msg(strstr(ptx, "cp.async.cg.shared.global") && strstr(ptx, ", 16;"), "%s", ptx);
    else ck_assert_msg(strstr(ptx, "ld.global.v4") || strstr(ptx, "ld.global.nc.v4"), "%s", ptx);
    free(ptx);
#endif
    run_cuda_host(w->func, m);
    cg_module_free(m);
    sch_free(ws.s);
  }
  ir_workload_free(w);
}
END_TEST

/* tf32 on a float32 matmul: the inputs rounded to 10 bits of mantissa, so the
 * result misses float32's tolerance by the rounding, not more (a wrong tile
 * would be off by its whole size): the harness rounds as the tensor cores do. */
START_TEST(test_gpu_wmma_tf32) {
  ir_workload_t *w = load_wl("matmul.tw", "M=64,N=64,K=64");
  sch_t *s = ws_tensorized(w->func, "C", NULL, "wmma_tf32_f32_16x16x8", 8);
  cg_module_t *m = lower_ok(sch_func(s), CG_TARGET_CUDA);
  HAS(m->source, "nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 8, nvcuda::wmma::precision::tf32, "
                 "nvcuda::wmma::row_major> tuned_wa;");
  HAS(m->source, "nvcuda::wmma::__float_to_tf32(tuned_wa.x[tuned_t]);");
  HAS(m->source, "fragment<nvcuda::wmma::accumulator, 16, 16, 8, float> C_local[2];");
  ck_assert_int_eq(m->min_sm, 80);
#if CG_TEST_NVRTC
  char *ptx = nvrtc_ptx(m->source, "sm_80");
  ck_assert_msg(strstr(ptx, "wmma.mma.sync.aligned.row.row.m16n16k8.f32.tf32.tf32.f32"), "%s", ptx);
  free(ptx);
#endif
  ms_result_t r = run_cuda_host_result(w->func, m);
  ck_assert_msg(r.status == MS_WRONG_RESULT, "%s: %s", ms_status_name(r.status), r.error);
  const char *e = strstr(r.error, "relative L2 error ");
  ck_assert_ptr_nonnull(e);
  double err = strtod(e + strlen("relative L2 error "), NULL);
  ck_assert_msg(err > 1e-4 && err < 2e-3, "tf32's error: %g", err);
  ms_result_clear(&r);
  cg_module_free(m);
  sch_free(s);
  ir_workload_free(w);
}
END_TEST

/* Tensor-core schedules the code generator refuses, by name: an accumulator
 * read element by element (its fragments' layout is the hardware's), other
 * targets than CUDA. */
START_TEST(test_gpu_wmma_refused) {
  ir_workload_t *w = load_wl("matmul_f16.tw", "M=64,N=64,K=32");
  wmma_sched_t ws = ws_schedule(w->func, "Acc", "C", 16);
  SCH_OK(sch_tensorize(ws.s, ws.init_loop, "wmma_fill_f32_16x16", err));
  SCH_OK(sch_tensorize(ws.s, ws.update_loop, "wmma_f16_f32_16x16x16", err));
  cg_module_t *m = NULL;
  tn_err_t err = {0};
  ck_assert_int_ne(cg_lower(sch_func(ws.s), CG_TARGET_CUDA, "kern", &m, &err), 0);
  ck_assert_msg(strstr(err.msg, "reads Acc_local element by element, but Acc_local lives in tensor-core accumulator "
                                "fragments (their layout is the hardware's); tensorize it with wmma_store_f32_16x16"),
                "%s", err.msg);
  SCH_OK(sch_tensorize(ws.s, ws.store_loop, "wmma_store_f32_16x16", err));
  static const cg_target_t other[2] = {CG_TARGET_OPENCL, CG_TARGET_C};
  for (int i = 0; i < 2; i++) {
    tn_err_t e = {0};
    ck_assert_int_ne(cg_lower(sch_func(ws.s), other[i], "kern", &m, &e), 0);
    char want[128];
    snprintf(want, sizeof want, "intrinsic wmma_fill_f32_16x16 has no implementation in %s code", cg_target_name(other[i]));
    ck_assert_msg(strstr(e.msg, want), "%s", e.msg);
  }
  cg_module_t *ok = lower_ok(sch_func(ws.s), CG_TARGET_CUDA);
  cg_module_free(ok);
  sch_free(ws.s);
  ir_workload_free(w);
}
END_TEST

/* The Hopper primitives (codegen/hopper.c) around tests/hopper_kernel.cuh,
 * compiled by the CUDA builder's NVRTC for sm_90a: PTX with wgmma.mma_async
 * m64n64k16/m64n128k16/m64n256k16, its fence/commit/wait, the mbarrier, the
 * TMA load and fence.proxy.async; where cuobjdump is installed (PATH or
 * PyPI's nvidia-cuda-cuobjdump), HGMMA and UTMALDG in the SASS.  sm_80 and plain sm_90 are
 * refused with the reason; an N out of range is refused. */
static char *hopper_source(void) {
  char *kernel = NULL;
  size_t len = 0;
  tn_err_t err = {0};
  ck_assert_msg(tn_read_file(SRC("tests/hopper_kernel.cuh"), 1 << 20, &kernel, &len, &err) == 0, "%s", err.msg);
  tn_buf_t b;
  tn_buf_init(&b);
  tn_buf_put(&b, "#include <cuda_fp16.h>\n");
  static const int ns[] = {64, 128, 256, 64};
  ck_assert_int_eq(cg_hopper_helpers(&b, ns, (int)TN_ARRAY_LEN(ns), &err), 0);
  tn_buf_put(&b, kernel);
  for (int n = 64; n <= 256; n *= 2)
    for (int swz = 0; swz < 4; swz++)
      tn_buf_printf(&b, "template __global__ void tuned_test_wgmma<%d, %d, %s>(const unsigned short *, const unsigned "
                    "short *, float *, unsigned, int);\n", n, swz, n == 128 && swz ? "true" : "false");
  tn_buf_put(&b, "template __global__ void tuned_test_wgmma_rs<64, false>(const unsigned short *, const unsigned short "
                 "*, float *);\ntemplate __global__ void tuned_test_wgmma_rs<128, true>(const unsigned short *, const "
                 "unsigned short *, float *);\n");
  tn_buf_put(&b, "template __global__ void tuned_test_wgmma_tma<128>(const __grid_constant__ tuned_tensor_map, "
                 "const __grid_constant__ tuned_tensor_map, float *, int, int, int, int);\n");
  free(kernel);
  return tn_buf_take(&b);
}

START_TEST(test_hopper_primitives) {
  char *src = hopper_source();
  ms_cuda_output_t o;
  tn_err_t err = {0};
  int rc = ms_cuda_compile(src, "sm_90a", &o, &err);
  if (rc == TN_EUNSUPPORTED && strstr(err.msg, "no CUDA support")) {
    printf("test_hopper_primitives: no NVRTC in this build, PTX not checked\n");
  } else {
    ck_assert_msg(rc == 0, "%s", err.msg);
    static const char *const want[] = {
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16", "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16",
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16", "wgmma.fence.sync.aligned",
        "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned 0", "mbarrier.init.shared",
        "mbarrier.arrive.shared", "mbarrier.try_wait.parity.shared", "fence.proxy.async.shared::cta",
        "mbarrier.arrive.expect_tx.shared", "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"};
    for (size_t i = 0; i < TN_ARRAY_LEN(want); i++) ck_assert_msg(strstr(o.ptx, want[i]), "PTX lacks %s", want[i]);
    ck_assert_msg(strstr(o.ptx, "}, {%r"), "PTX lacks a wgmma with A in registers"); /* the d list, then a's */
    char *sass = tu_cubin_sass(o.cubin, o.cubin_size);
    if (!sass) {
      printf("test_hopper_primitives: cuobjdump not installed (scripts/install-deps), SASS not checked\n");
    } else {
      ck_assert_msg(strstr(sass, "HGMMA.64x64x16.F32") && strstr(sass, "HGMMA.64x128x16.F32") &&
                    strstr(sass, "HGMMA.64x256x16.F32") && strstr(sass, "UTMALDG.2D"), "%s", sass);
      free(sass);
    }
    ms_cuda_output_free(&o);
    static const char *const old[] = {"sm_80", "sm_90"}; /* wgmma needs the arch-specific sm_90a */
    for (int i = 0; i < 2; i++) {
      err = (tn_err_t){0};
      ck_assert_int_lt(ms_cuda_compile(src, old[i], &o, &err), 0);
      ck_assert_msg(strstr(err.msg, "need --gpu-architecture=sm_90a") && !o.ptx, "%s: %s", old[i], err.msg);
      ms_cuda_output_free(&o);
    }
  }
  free(src);
  tn_buf_t b;
  tn_buf_init(&b);
  static const int bad[] = {64, 12};
  err = (tn_err_t){0};
  ck_assert_int_eq(cg_hopper_helpers(&b, bad, 2, &err), TN_EINVAL);
  ck_assert_str_eq(err.msg, "wgmma m64nNk16 needs N from 8 to 256 in steps of 8, not 12");
  tn_buf_free(&b);
}
END_TEST

/* ---- reserved names ------------------------------------------------------------ */

/* Every name of the reserved table (common/reserved.c) and one name per
 * reserved prefix (cudaAx1, __x1), malloc'ed; *n gets the count. */
static const char **reserved_names(size_t *n) {
  const char *const *names, *const *prefixes;
  size_t ne = tn_reserved_list(false, &names, NULL), np = tn_reserved_list(true, &prefixes, NULL);
  const char **out = tn_xmalloc(sizeof *out * (ne + np));
  for (size_t i = 0; i < ne; i++) out[i] = names[i];
  static char samples[256][32];
  ck_assert_uint_le(np, TN_ARRAY_LEN(samples));
  for (size_t i = 0; i < np; i++) {
    snprintf(samples[i], sizeof samples[i], "%sx1", prefixes[i]);
    out[ne + i] = samples[i];
  }
  *n = ne + np;
  return out;
}

/* p<lo>[i] + ... + p<hi-1>[i] as a balanced tree (the parser takes at
 * most 200 levels of operators). */
static void sum_text(tn_buf_t *t, int lo, int hi) {
  if (hi - lo == 1) {
    tn_buf_printf(t, "p%d[i]", lo);
    return;
  }
  tn_buf_put(t, "(");
  sum_text(t, lo, (lo + hi) / 2);
  tn_buf_put(t, " + ");
  sum_text(t, (lo + hi) / 2, hi);
  tn_buf_put(t, ")");
}

/* out[i] = in0[i] + in1[i] + ... over N = 64, its k buffers named by names
 * (the output last) and its loop variable by names[0], as no workload text
 * could name them: what reaches code generation from elsewhere (an IR
 * built by hand, a future front end) must come out renamed too. */
static ir_workload_t *named_sum(const char *const *names, int k) {
  tn_buf_t t;
  tn_buf_init(&t);
  tn_buf_put(&t, "param N = 64\n");
  for (int i = 0; i < k - 1; i++) tn_buf_printf(&t, "input p%d: float32[N]\n", i);
  tn_buf_put(&t, "output q: float32[N]\nq[i] = ");
  sum_text(&t, 0, k - 1);
  tn_buf_put(&t, "\n");
  ir_workload_t *w = text_wl(tn_buf_str(&t));
  tn_buf_free(&t);
  ck_assert_int_eq(w->func->nparams, k);
  for (int i = 0; i < k; i++) w->func->params[i]->name = names[i];
  ir_stmt_t *s = root_item(w->func, 0);
  ck_assert_int_eq(s->kind, IR_S_LOOP);
  s->u.loop.var->name = names[0];
  return w;
}

#if TUNED_HAVE_OPENCL
/* Builds src as OpenCL C 1.2 and as 3.0 on the first device; a failed build
 * fails the test with the log.  (PoCL compiles a kernel's work-group
 * function at its first launch: a build alone is quick.) */
static void opencl_build_both(const char *src) {
  opencl_setup();
  static cl_context ctx;
  static cl_device_id dev;
  if (!ctx) {
    cl_platform_id plat;
    cl_uint nplat = 0;
    cl_int e;
    if (clGetPlatformIDs(1, &plat, &nplat) != CL_SUCCESS || nplat == 0) return;
    CL_OK(clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
    ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
    CL_OK(e);
  }
  static const char *const stds[] = {"-cl-std=CL1.2", "-cl-std=CL3.0"};
  for (int i = 0; i < 2; i++) {
    cl_int e;
    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &e);
    CL_OK(e);
    if (clBuildProgram(prog, 1, &dev, stds[i], NULL, NULL) != CL_SUCCESS) {
      static char blog[65536];
      clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, sizeof blog, blog, NULL);
      ck_abort_msg("OpenCL build (%s) failed:\n%.3000s\n%.500s", stds[i], blog, src);
    }
    clReleaseProgram(prog);
  }
}
#endif

/* Every name of the table on every backend: C (as the cc builder compiles
 * it: one kernel with them all, run and checked), and in kernels of at
 * most 100 buffers (OpenCL's 1024 bytes of kernel arguments, the worker's
 * 128 arguments) CUDA (NVRTC for sm_75, and run and checked through the
 * cuda-host harness) and OpenCL on PoCL (built as OpenCL C 1.2 and 3.0;
 * the first also run and checked). */
START_TEST(test_reserved_names_every_backend) {
  size_t n;
  const char **names = reserved_names(&n);
  ck_assert_uint_gt(n, 2000);
  ir_workload_t *w = named_sum(names, (int)n);
  free(check_c(w->func, w->func));
  ir_workload_free(w);
  const size_t per = 100;
  for (size_t at = 0; at < n; at += per) {
    w = named_sum(names + at, (int)TN_MIN(per, n - at));
    ir_func_t *g = bind_outer(w->func, 32);
    cg_module_t *m = lower_ok(g, CG_TARGET_CUDA);
#if CG_TEST_NVRTC
    nvrtc_compile(m->source, "sm_75");
#endif
    run_cuda_host(w->func, m);
    cg_module_free(m);
    m = lower_ok(g, CG_TARGET_OPENCL);
#if TUNED_HAVE_OPENCL
    opencl_build_both(m->source);
    if (at == 0) run_opencl(g, w->func, m);
#endif
    cg_module_free(m);
    ir_func_free(g);
    ir_workload_free(w);
  }
  /* and no reserved name can be an entry point */
  for (size_t i = 0; i < n; i++) ck_assert_msg(!cg_entry_usable(names[i]), "%s", names[i]);
  free(names);
}
END_TEST

/* ---- the table against the compilers' headers ------------------------------- */

/* Names, sorted and unique by ids_done. */
typedef struct idset {
  char **v;
  size_t n, cap;
} idset_t;

static void ids_add(idset_t *s, const char *p, size_t len) {
  if (s->n == s->cap) s->v = tn_xrealloc(s->v, sizeof *s->v * (s->cap = s->cap * 2 + 1024));
  char *t = tn_xmalloc(len + 1);
  memcpy(t, p, len);
  t[len] = 0;
  s->v[s->n++] = t;
}

static int ids_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void ids_done(idset_t *s) {
  qsort(s->v, s->n, sizeof *s->v, ids_cmp);
  size_t k = 0;
  for (size_t i = 0; i < s->n; i++)
    if (k && strcmp(s->v[k - 1], s->v[i]) == 0) free(s->v[i]);
    else s->v[k++] = s->v[i];
  s->n = k;
}

static void ids_free(idset_t *s) {
  for (size_t i = 0; i < s->n; i++) free(s->v[i]);
  free(s->v);
}

static bool id_char(char ch) {
  return ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
}

/* The identifiers of text that generated code could meet unrenamed: none
 * the table holds, none led by '_' (reserved) and none of the macro style
 * (no lowercase letter: codegen prefixes those). */
static void ids_unreserved(idset_t *s, const char *text) {
  for (const char *p = text; *p;) {
    if (!id_char(*p) || (*p >= '0' && *p <= '9')) {
      p++;
      continue;
    }
    const char *q = p;
    bool lower = false;
    while (id_char(*q)) lower |= *q >= 'a' && *q <= 'z', q++;
    if (*p != '_' && lower && q - p < 64) {
      char w[64];
      memcpy(w, p, (size_t)(q - p));
      w[q - p] = 0;
      if (!tn_reserved_langs(w)) ids_add(s, p, (size_t)(q - p));
    }
    p = q;
  }
}

static void ids_of_file(idset_t *s, const char *path, bool declared_functions) {
  char *text = NULL;
  size_t len = 0;
  tn_err_t err = {0};
  ck_assert_msg(tn_read_file(path, (size_t)64 << 20, &text, &len, &err) == 0, "%s", err.msg);
  if (!declared_functions) {
    ids_unreserved(s, text);
  } else { /* the function names of `... __ovld ... NAME(` declarations (OpenCL's overloaded builtins) */
    for (const char *p = strstr(text, "__ovld"); p; p = strstr(p + 6, "__ovld")) {
      const char *paren = p + strcspn(p, "(;{");
      if (*paren != '(') continue;
      const char *e = paren;
      while (e > p && e[-1] == ' ') e--;
      const char *b = e;
      while (b > p && id_char(b[-1])) b--;
      if (b < e && *b != '_') ids_add(s, b, (size_t)(e - b));
    }
  }
  free(text);
}

/* The line number of an error line of a compiler's log ("FILE:LINE:COL:
 * error: ..." as gcc and clang write it, "error: FILE:LINE:COL: ..." as
 * PoCL does, "FILE(LINE): error: ..." as NVRTC does); 0 when none. */
static long error_line(const char *line, size_t len) {
  const char *e = strstr(line, "error");
  if (!e || e >= line + len) return 0;
  for (const char *p = line; p < line + len; p++) {
    char *end;
    if (*p == '(' && p[1] >= '0' && p[1] <= '9') {
      long v = strtol(p + 1, &end, 10);
      if (strncmp(end, "): error", 8) == 0) return v;
    }
    if (*p == ':' && p[1] >= '0' && p[1] <= '9') {
      long v = strtol(p + 1, &end, 10);
      if (*end == ':' && end[1] >= '0' && end[1] <= '9') return v;
    }
  }
  return 0;
}

/* The names among s->v that a compile of `prelude` + one `enum { NAME };`
 * per name rejects, by the line numbers of its log's errors, as text. */
static char *rejected_names(const idset_t *s, const char *prelude, const char *log) {
  int head = 0;
  for (const char *p = prelude; *p; p++) head += *p == '\n';
  tn_buf_t out;
  tn_buf_init(&out);
  const char *last = NULL;
  for (const char *line = log; *line;) {
    size_t len = strcspn(line, "\n");
    long ln = error_line(line, len) - head - 1;
    if (ln >= 0 && (size_t)ln < s->n && (!last || strcmp(last, s->v[ln]) != 0)) /* a name's errors come together */
      tn_buf_printf(&out, " %s", last = s->v[ln]);
    line += len + (line[len] == '\n');
  }
  return tn_buf_take(&out);
}

/* Checks what a probe rejected (" a b c", from rejected_names): every one of
 * the controls (names of the table the compiler must know: the probe can
 * see) and nothing else (a name the table lacks).  Frees bad. */
static void check_rejected(const char *who, char *bad, const char *const *controls, size_t ncontrols) {
  tn_buf_t extra;
  tn_buf_init(&extra);
  size_t seen = 0;
  for (char *tok = strtok(bad, " "); tok; tok = strtok(NULL, " ")) {
    bool control = false;
    for (size_t i = 0; i < ncontrols; i++) control |= strcmp(tok, controls[i]) == 0;
    if (control) seen++;
    else tn_buf_printf(&extra, " %s", tok);
  }
  ck_assert_msg(extra.len == 0, "%s rejects names that the reserved table (common/reserved.c) lacks:%s", who,
                tn_buf_str(&extra));
  ck_assert_msg(seen == ncontrols, "%s rejected %zu of the %zu control names: the probe does not see", who, seen,
                ncontrols);
  tn_buf_free(&extra);
  free(bad);
}

static char *probe_source(const idset_t *s, const char *prelude) {
  tn_buf_t src;
  tn_buf_init(&src);
  tn_buf_put(&src, prelude);
  for (size_t i = 0; i < s->n; i++) tn_buf_printf(&src, "enum { %s };\n", s->v[i]);
  return tn_buf_take(&src);
}

/* Runs cmd (a shell command); its exit status. */
static int shell(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int shell(const char *fmt, ...) {
  char cmd[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  int st = system(cmd);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* C: what the generated C's headers and the compiler's predefined macros
 * name (the cc builder's flags), declared once more in a compile that
 * includes those headers: it rejects none (none the table lacks), and it
 * does reject the controls (names of the table it must know). */
static void probe_c(const char *cc) {
  if (shell("command -v %s >/dev/null", cc) != 0) {
    fprintf(stderr, "test_codegen: no %s here; its headers not probed\n", cc);
    return;
  }
  static const char prelude[] = "#include <math.h>\n#include <stdint.h>\n#include <stdlib.h>\n";
  static const char flags[] = "-O3 -march=native -fopenmp";
  char dir[] = "/tmp/tuned-probe-XXXXXX", path[128];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/inc.c", dir);
  write_file(path, prelude);
  ck_assert_int_eq(shell("cd %s && %s %s -E -dD inc.c > pre.txt && %s %s -E -dM -x c /dev/null >> pre.txt", dir, cc,
                         flags, cc, flags), 0);
  idset_t ids = {0};
  snprintf(path, sizeof path, "%s/pre.txt", dir);
  ids_of_file(&ids, path, false);
  static const char *const controls[] = {"size_t", "sqrtf", "int32_t", "malloc"}; /* in the table */
  for (size_t i = 0; i < TN_ARRAY_LEN(controls); i++) ids_add(&ids, controls[i], strlen(controls[i]));
  ids_done(&ids);
  ck_assert_uint_gt(ids.n, 50);
  char *src = probe_source(&ids, prelude);
  snprintf(path, sizeof path, "%s/probe.c", dir);
  write_file(path, src);
  shell("cd %s && %s %s -fsyntax-only %s probe.c 2> log.txt", dir, cc, flags,
        strstr(cc, "clang") ? "-ferror-limit=0" : "-fmax-errors=0");
  snprintf(path, sizeof path, "%s/log.txt", dir);
  char *log = NULL;
  size_t len;
  tn_err_t err = {0};
  ck_assert_int_eq(tn_read_file(path, (size_t)64 << 20, &log, &len, &err), 0);
  check_rejected(cc, rejected_names(&ids, prelude, log), controls, TN_ARRAY_LEN(controls));
  free(log);
  free(src);
  ids_free(&ids);
  rm_tree(dir);
}

START_TEST(test_reserved_table_c) {
  probe_c("gcc");
  probe_c("clang");
}
END_TEST

/* The files that glob patterns match, their identifiers added to s (or,
 * declared_functions, the names of OpenCL's __ovld declarations); the count. */
static int ids_of_glob(idset_t *s, const char *const *patterns, size_t n, bool declared_functions) {
  int files = 0;
  for (size_t i = 0; i < n; i++) {
    glob_t g;
    if (glob(patterns[i], 0, NULL, &g) != 0) continue;
    for (size_t k = 0; k < g.gl_pathc; k++, files++) ids_of_file(s, g.gl_pathv[k], declared_functions);
    globfree(&g);
  }
  return files;
}

/* OpenCL C: every builtin function PoCL's headers declare is in the table,
 * and a PoCL build (OpenCL C 3.0) of one `enum { NAME };` per other name of
 * those headers rejects none of them. */
START_TEST(test_reserved_table_opencl) {
#if TUNED_HAVE_OPENCL
  static const char *const headers[] = {"/usr/share/pocl/include/*.h", "/usr/local/share/pocl/include/*.h"};
  idset_t fns = {0}, ids = {0};
  if (!ids_of_glob(&fns, headers, TN_ARRAY_LEN(headers), true)) {
    fprintf(stderr, "test_codegen: no PoCL headers here; OpenCL C's builtins not probed\n");
    return;
  }
  ids_done(&fns);
  ck_assert_uint_gt(fns.n, 500);
  tn_buf_t missing;
  tn_buf_init(&missing);
  for (size_t i = 0; i < fns.n; i++)
    if (!(tn_reserved_langs(fns.v[i]) & TN_RW_OPENCL)) tn_buf_printf(&missing, " %s", fns.v[i]);
  ck_assert_msg(missing.len == 0, "OpenCL C builtins the reserved table lacks:%s", tn_buf_str(&missing));
  tn_buf_free(&missing);
  ids_free(&fns);
  ids_of_glob(&ids, headers, TN_ARRAY_LEN(headers), false);
  static const char *const controls[] = {"float4", "uint", "image2d_t", "pipe"};
  for (size_t i = 0; i < TN_ARRAY_LEN(controls); i++) ids_add(&ids, controls[i], strlen(controls[i]));
  ids_done(&ids);
  char *src = probe_source(&ids, "");
  opencl_setup();
  cl_platform_id plat;
  cl_device_id dev;
  cl_uint nplat = 0;
  cl_int e;
  if (clGetPlatformIDs(1, &plat, &nplat) != CL_SUCCESS || nplat == 0) return;
  CL_OK(clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
  cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
  CL_OK(e);
  const char *text = src;
  cl_program prog = clCreateProgramWithSource(ctx, 1, &text, NULL, &e);
  CL_OK(e);
  ck_assert_int_ne(clBuildProgram(prog, 1, &dev, "-cl-std=CL3.0", NULL, NULL), CL_SUCCESS);
  size_t n = 0;
  clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
  char *log = tn_xcalloc(n + 1, 1);
  clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, n, log, NULL);
  check_rejected("PoCL", rejected_names(&ids, "", log), controls, TN_ARRAY_LEN(controls));
  free(log);
  clReleaseProgram(prog);
  clReleaseContext(ctx);
  free(src);
  ids_free(&ids);
#endif
}
END_TEST

/* CUDA: one `enum { NAME };` per name of the CUDA headers NVRTC compiles
 * generated code with (crt/, the device and vector headers, fp16, bf16,
 * fp8, mma), after including cuda_fp16.h, cuda_bf16.h and mma.h: NVRTC
 * rejects none that the table lacks. */
START_TEST(test_reserved_table_cuda) {
#if CG_TEST_NVRTC
  static const char *const headers[] = {
      TUNED_CUDA_INCLUDE "/crt/*.h", TUNED_CUDA_INCLUDE "/crt/*.hpp", TUNED_CUDA_INCLUDE "/device_*.h",
      TUNED_CUDA_INCLUDE "/sm_*.h", TUNED_CUDA_INCLUDE "/sm_*.hpp", TUNED_CUDA_INCLUDE "/vector_*.h",
      TUNED_CUDA_INCLUDE "/texture_*.h", TUNED_CUDA_INCLUDE "/surface_*.h", TUNED_CUDA_INCLUDE "/cuda_fp16*",
      TUNED_CUDA_INCLUDE "/cuda_bf16*", TUNED_CUDA_INCLUDE "/cuda_fp8*", TUNED_CUDA_INCLUDE "/builtin_types.h",
      TUNED_CUDA_INCLUDE "/driver_types.h", TUNED_CUDA_INCLUDE "/cuda_runtime_api.h",
      TUNED_CUDA_INCLUDE "/cuda_device_runtime_api.h", TUNED_CUDA_INCLUDE "/math_constants.h"};
  idset_t ids = {0};
  ck_assert_int_gt(ids_of_glob(&ids, headers, TN_ARRAY_LEN(headers), false), 20);
  static const char *const controls[] = {"atomicAdd", "threadIdx", "hexp", "sinf"};
  for (size_t i = 0; i < TN_ARRAY_LEN(controls); i++) ids_add(&ids, controls[i], strlen(controls[i]));
  ids_done(&ids);
  static const char prelude[] = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <mma.h>\n";
  char *src = probe_source(&ids, prelude);
  nvrtcProgram p;
  ck_assert_int_eq(nvrtcCreateProgram(&p, src, "probe.cu", 0, NULL, NULL), NVRTC_SUCCESS);
  const char *opts[] = {"--gpu-architecture=sm_75", "-I" TUNED_CUDA_INCLUDE};
  ck_assert_int_ne(nvrtcCompileProgram(p, 2, opts), NVRTC_SUCCESS);
  size_t n = 0;
  nvrtcGetProgramLogSize(p, &n);
  char *log = tn_xcalloc(n + 1, 1);
  nvrtcGetProgramLog(p, log);
  nvrtcDestroyProgram(&p);
  check_rejected("NVRTC", rejected_names(&ids, prelude, log), controls, TN_ARRAY_LEN(controls));
  free(log);
  free(src);
  ids_free(&ids);
#endif
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("codegen");
  TCase *c = tcase_create("c");
  tcase_set_timeout(c, 120);
  tcase_add_loop_test(c, test_c_workloads, 0, (int)TN_ARRAY_LEN(small));
  tcase_add_test(c, test_c_source_shape);
  tcase_add_test(c, test_c_dtypes);
  tcase_add_test(c, test_c_matmul_local);
  tcase_add_test(c, test_c_team_leaves_busy_cores);
  tcase_add_test(c, test_c_big_caches_on_heap);
  tcase_add_test(c, test_c_gpu_schedules_run_serially);
  tcase_add_test(c, test_names_and_targets);
  tcase_add_test(c, test_c_tensor_intrinsics);
  tcase_add_test(c, test_c_vector_math);
  tcase_add_test(c, test_c_invariant_divisor);
  tcase_add_test(c, test_c_fused_producer);
  tcase_add_test(c, test_c_lane_accumulators);
  tcase_add_test(c, test_c_simd_sum);
  tcase_add_test(c, test_c_fmax_nan);
  tcase_add_test(c, test_gpu_tensor_intrinsic_refused);
  suite_add_tcase(s, c);
  TCase *g = tcase_create("gpu");
  tcase_set_timeout(g, 300);
  tcase_add_test(g, test_gpu_vector_add);
  tcase_add_loop_test(g, test_gpu_all_workloads, 0, (int)TN_ARRAY_LEN(small));
  tcase_add_test(g, test_gpu_dtypes);
  tcase_add_test(g, test_gpu_vthread);
  tcase_add_test(g, test_gpu_vector_partial);
  tcase_add_test(g, test_gpu_matmul_tiled);
  tcase_add_test(g, test_gpu_matmul_pipelined);
  tcase_add_test(g, test_gpu_dynamic_shared);
  tcase_add_test(g, test_gpu_cross_thread_reduction);
  tcase_add_test(g, test_gpu_cross_thread_decomposed);
  tcase_add_test(g, test_gpu_fused_softmax);
  tcase_add_test(g, test_gpu_no_restrict_across_barrier);
  tcase_add_test(g, test_gpu_wmma);
  tcase_add_test(g, test_gpu_wmma_tf32);
  tcase_add_test(g, test_gpu_wmma_pipelined);
  tcase_add_test(g, test_gpu_wmma_vector_copies);
  tcase_add_test(g, test_gpu_wmma_refused);
  suite_add_tcase(s, g);
  TCase *sc = tcase_create("schedules");
  tcase_set_timeout(sc, 300);
  tcase_add_test(sc, test_schedule_module_gpu);
  tcase_add_test(sc, test_schedule_module_cpu);
  tcase_add_test(sc, test_c_promoted_accumulators);
  tcase_add_test(sc, test_c_promoted_across_reduction_loops);
  tcase_add_test(sc, test_c_temp_carried_by_reduction);
  suite_add_tcase(s, sc);
  TCase *h = tcase_create("hopper");
  tcase_set_timeout(h, 120);
  tcase_add_test(h, test_hopper_primitives);
  suite_add_tcase(s, h);
  TCase *rn = tcase_create("reserved");
  tcase_set_timeout(rn, 600);
  tcase_add_test(rn, test_reserved_names_every_backend);
  tcase_add_test(rn, test_reserved_table_c);
  tcase_add_test(rn, test_reserved_table_opencl);
  tcase_add_test(rn, test_reserved_table_cuda);
  suite_add_tcase(s, rn);
  TCase *e = tcase_create("errors");
  tcase_add_test(e, test_errors);
  suite_add_tcase(s, e);
  return s;
}

TN_TEST_MAIN(make_suite)
