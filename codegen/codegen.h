/* codegen.h — lowering of a (scheduled) tensor IR function to C (CPU, with
 * OpenMP pragmas), CUDA C or OpenCL C source plus its launch configuration.
 * The codegen/ module's only public header.  Prefix: cg_.
 *
 * The module only writes text: it never compiles or runs anything.
 *
 * C target: one function
 *     int <entry>(float *restrict A, float *restrict B, ...)   (f->params order,
 *                                                              then packed copies)
 * returning 0, or -1 when a temporary buffer could not be allocated, and a
 * wrapper `int tuned_entry_<entry>(void **args)` that calls it with args[i]
 * cast to the parameter's pointer type (what a CPU runner dlsym()s; named
 * after the entry, so that kernels with different entries link into one
 * program).  A hoisted packing (schedule's hoist_packing of a const input W)
 * is a function of its own, `int <entry>_pack_W(const float *W, float *W_p)`,
 * run once per weight; the kernel takes W_p after the parameters (role
 * "packed") and no longer reads W, and `int tuned_pack_<entry>(void **args)`
 * runs every packing function on the same argument array as the wrapper.
 * float16 data is
 * stored as uint16_t (IEEE half bits) and computed in float.
 *
 * A runner that dlopen()s the built library should pass RTLD_NODELETE:
 * unloading it would unmap libgomp under its idle OpenMP workers.
 *
 * CUDA / OpenCL targets: one kernel per top-level loop nest of the root block
 * (`<entry>_kernel<k>`, run in order, one launch each, same argument list).
 * Every kernel takes the module's parameters: f->params followed by global-
 * scope temporaries (role IR_BUF_TEMP), which the runner allocates as
 * scratch ("workspace") buffers because they live across kernels.  Launch with
 * global size grid*block (OpenCL) or <<<grid, block, dyn_shared_bytes>>>.
 * float16 is __half in CUDA (the source includes <cuda_fp16.h>; the builder
 * gives NVRTC the toolkit's include directory, found beside the libnvrtc it
 * loaded) and half through vload_half/vstore_half in OpenCL
 * (shared/local float16 arrays are float there). */
#ifndef TUNED_CODEGEN_H
#define TUNED_CODEGEN_H

#include "common/common.h"
#include "common/target.h"
#include "ir/ir.h"

typedef enum cg_target { CG_TARGET_C, CG_TARGET_CUDA, CG_TARGET_OPENCL } cg_target_t;

/* "c", "cuda", "opencl". */
const char *cg_target_name(cg_target_t t);
/* Accepts the names above (and "cpu" for c); TN_EINVAL otherwise. */
int cg_target_parse(const char *s, cg_target_t *out);

/* Entry name used when cg_lower gets NULL. */
#define CG_ENTRY_DEFAULT "default_function"
/* Longest entry name: kernel names append "_kernel<k>" and must fit 64 bytes. */
#define CG_ENTRY_MAX 47

/* One argument of the generated function / every kernel. */
typedef struct cg_param {
  char *name;        /* the IR buffer name */
  ir_dtype_t dtype;
  int ndim;
  int64_t shape[IR_MAX_DIMS];
  ir_buf_role_t role; /* INPUT, OUTPUT, or TEMP: a workspace (GPU targets) or a packed copy */
  int64_t elements;   /* elements to allocate: the shape's, or more for rows padded by storage_align */
  /* A packed copy (C target, schedule's hoist_packing): the constant input
   * it holds (role TEMP) and the function that fills it,
   * int <pack_fn>(const T *input, T *packed), to run once per weight before
   * the kernel; NULL for other parameters. */
  char *packs, *pack_fn;
} cg_param_t;

/* A TMA tensor map that a CUDA kernel takes after the module's parameters
 * (`const __grid_constant__ tuned_tensor_map <name>`): what the launcher
 * makes with cuTensorMapEncodeTiled (2-D, tile mode, no interleave, no L2
 * promotion, zero fill) from the device address of parameter `param`. */
#define CG_MAX_TENSOR_MAPS 2
typedef struct cg_tensor_map {
  char name[32];
  int param;           /* index into the module's params: the buffer the map describes */
  int64_t dims[2];     /* elements: the contiguous dimension, then the rows (outer dimensions folded in) */
  int64_t stride_bytes; /* from one row to the next */
  int box[2];          /* the tile a copy brings, elements: along dims[0], dims[1] */
  int swizzle;         /* bytes: 0 (none), 32, 64 or 128 */
} cg_tensor_map_t;

/* One kernel launch (the C target has one entry describing the function). */
typedef struct cg_kernel {
  char name[64];
  int64_t grid[3], block[3];   /* all 1 for the C target */
  int64_t dyn_shared_bytes;    /* dynamic shared memory to pass at launch (CUDA kernels over 48 KiB) */
  int64_t static_shared_bytes; /* __shared__ / __local arrays declared in the source */
  cg_tensor_map_t maps[CG_MAX_TENSOR_MAPS]; /* CUDA: arguments after the module's parameters, in order */
  int nmaps;
  int cluster; /* CUDA: CTAs per thread-block cluster along x (the kernel's __cluster_dims__); 0 or 1: none */
} cg_kernel_t;

typedef struct cg_module {
  cg_target_t target;
  char entry[64];
  char *source;       /* self-contained: only standard / CUDA headers */
  cg_kernel_t *kernels;
  int nkernels;
  cg_param_t *params;
  int nparams;
  int min_sm;         /* CUDA: the lowest architecture the source is for (tensor-core intrinsics: 70 for
                         sm_70); 0 any */
  bool sm90a;         /* CUDA: Hopper's architecture-specific features (wgmma, mbarrier transaction counts):
                         to be built for sm_90a, and run on sm_90 only */
} cg_module_t;

/* Whether s can name an entry point: an identifier (tn_is_identifier) of
 * at most CG_ENTRY_MAX characters that is no name of the reserved table
 * (tn_reserved_langs: a keyword, type or builtin of C, C++/CUDA or OpenCL
 * C, a C library function or macro such as exit, sinf, errno or pipe),
 * not macro-like (M_PI, NAME) and without a leading underscore. */
bool cg_entry_usable(const char *s);
/* The entry point a workload's kernel gets: the workload's name when usable,
 * else CG_ENTRY_DEFAULT (the daemon's kernel.get and tunectl emit/run agree). */
const char *cg_entry_for(const char *workload_name);

/* Lowers f for target.  entry must be usable (cg_entry_usable); NULL means
 * CG_ENTRY_DEFAULT.  Errors
 * (TN_EINVAL unless said otherwise) name the block or loop: an unbound root
 * statement on a GPU target, loops bound to one thread tag with different
 * extents, an unknown thread tag, a cross-thread reduction that cannot be
 * lowered (TN_EUNSUPPORTED), a shared/local buffer used by two kernels. */
int cg_lower(const ir_func_t *f, cg_target_t target, const char *entry, cg_module_t **out,
             tn_err_t *err);
/* cg_lower for target t: in its language (c for cpu, cuda for cuda and
 * cuda-host, opencl), with the limit of its file that shapes the code: a
 * CUDA kernel whose shared arrays exceed t->max_shared_memory_per_block
 * (what static __shared__ arrays may hold) declares one dynamic array
 * instead (cg_kernel_t's dyn_shared_bytes).  cg_lower, without a target,
 * takes the CUDA language's 48 KiB. */
int cg_lower_for(const ir_func_t *f, const tn_target_t *t, const char *entry, cg_module_t **out, tn_err_t *err);
void cg_module_free(cg_module_t *m);

/* The launch configuration as JSON (malloc'ed, free() it):
 * {"target": "cuda", "entry": "...",
 *  "kernels": [{"name": "...", "grid": [x, y, z], "block": [x, y, z],
 *               "dyn_shared_bytes": 0, "static_shared_bytes": N,
 *               "tensor_maps": [{"name": "tuned_map_a", "param": "A", "dims": [K, M],
 *                                "stride_bytes": 2K, "box": [64, 128], "swizzle": 128}]
 *                 (only a kernel that takes tensor maps; cg_tensor_map_t)}, ...],
 *  "params": [{"name": "A", "dtype": "float32", "shape": [..], "role": "input",
 *              "elements": N}, ...]}
 * role is "input", "output", "workspace" or "packed" (which also has
 * "packs": the input's name and "pack_function": its packing function's
 * name; elements counts the padding of its rows); a module with packed
 * parameters has "pack_entry": "tuned_pack_<entry>".  NULL only when out of
 * memory. */
char *cg_module_launch_json(const cg_module_t *m);

/* Prints the CUDA text of the Hopper primitives (codegen/hopper.c): wgmma
 * m64nNk16 f16/bf16 -> f32 (one overload of tuned_wgmma_f16/_bf16 per N in
 * ns, 8 to 256 in steps of 8), wgmma fence/commit/wait, mbarrier, the matrix
 * descriptor and fence.proxy.async.  The text needs --gpu-architecture=sm_90a
 * (an #error says so elsewhere) and is skipped under the cuda-host harness,
 * which emulates the same functions.  TN_EINVAL for an N out of range. */
int cg_hopper_helpers(tn_buf_t *o, const int *ns, int nn, tn_err_t *err);

#endif
