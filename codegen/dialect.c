/* dialect.c — the three output dialects as data: every spelling that differs
 * between C, CUDA C and OpenCL C lives in these tables, so one lowering and
 * one printer serve all targets. */
#include "cg_internal.h"

/* Types are indexed by ir_dtype_t: bool, int32, int64, float16, float32, float64, bfloat16. */

static const cg_dialect_t dialect_c = {
    .target = CG_TARGET_C,
    .gpu = false,
    .kernel_decl = "",
    .ptr_space = "",
    .restrict_kw = "restrict",
    .shared_decl = "",
    .helper_qual = "static inline",
    .block_idx = {"0", "0", "0"},
    .thread_idx = {"0", "0", "0"},
    .unroll = NULL,
    .barrier_local = "",
    .barrier_all = "",
    .int64_suffix = "LL",
    .math_overloaded = false,
    .storage = {"uint8_t", "int32_t", "int64_t", "uint16_t", "float", "double", "uint16_t"},
    .compute = {"int", "int32_t", "int64_t", "float", "float", "double", "float"},
    .half_arrays = true,
    .half_load = "tuned_h2f(%1$s[%2$s])",
    .half_store = "%1$s[%2$s] = tuned_f2h(%3$s);",
    .bf16_load = "tuned_bf2f(%1$s[%2$s])",
    .bf16_store = "%1$s[%2$s] = tuned_f2bf(%3$s);",
    .vec_load = NULL,
    .vec_store = NULL,
    .shuffle = false,
};

static const cg_dialect_t dialect_cuda = {
    .target = CG_TARGET_CUDA,
    .gpu = true,
    .kernel_decl = "extern \"C\" __global__",
    .ptr_space = "",
    .restrict_kw = "__restrict__",
    .shared_decl = "__shared__ __align__(16) ",
    .helper_qual = "static __device__ __forceinline__",
    .block_idx = {"(int)blockIdx.x", "(int)blockIdx.y", "(int)blockIdx.z"},
    .thread_idx = {"(int)threadIdx.x", "(int)threadIdx.y", "(int)threadIdx.z"},
    .unroll = "#pragma unroll",
    .barrier_local = "__syncthreads();",
    .barrier_all = "__syncthreads();",
    .int64_suffix = "LL",
    .math_overloaded = false,
    .storage = {"unsigned char", "int", "long long", "__half", "float", "double", "__nv_bfloat16"},
    .compute = {"int", "int", "long long", "float", "float", "double", "float"},
    .half_arrays = true,
    .half_load = "__half2float(%1$s[%2$s])",
    .half_store = "%1$s[%2$s] = __float2half(%3$s);",
    .bf16_load = "__bfloat162float(%1$s[%2$s])",
    .bf16_store = "%1$s[%2$s] = __float2bfloat16(%3$s);",
    .vec_load = "*(const float%3$d *)(%1$s + %2$s)",
    .vec_store = "*(float%4$d *)(%1$s + %2$s) = %3$s;",
    .shuffle = true,
};

static const cg_dialect_t dialect_opencl = {
    .target = CG_TARGET_OPENCL,
    .gpu = true,
    .kernel_decl = "__kernel",
    .ptr_space = "__global ",
    .restrict_kw = "restrict",
    .shared_decl = "__local ",
    .helper_qual = "static inline",
    .block_idx = {"(int)get_group_id(0)", "(int)get_group_id(1)", "(int)get_group_id(2)"},
    .thread_idx = {"(int)get_local_id(0)", "(int)get_local_id(1)", "(int)get_local_id(2)"},
    .unroll = "#pragma unroll",
    .barrier_local = "barrier(CLK_LOCAL_MEM_FENCE);",
    .barrier_all = "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);",
    .int64_suffix = "L",
    .math_overloaded = true,
    /* half is only usable through pointers without cl_khr_fp16: global
     * float16 data goes through vload_half/vstore_half, shared/local arrays
     * of float16 are kept as float. */
    .storage = {"uchar", "int", "long", "half", "float", "double", "ushort"},
    .compute = {"int", "int", "long", "float", "float", "double", "float"},
    .half_arrays = false,
    .half_load = "vload_half(%2$s, %1$s)",
    .half_store = "vstore_half(%3$s, %2$s, %1$s);",
    .bf16_load = "tuned_bf2f(%1$s[%2$s])",
    .bf16_store = "%1$s[%2$s] = tuned_f2bf(%3$s);",
    .vec_load = "vload%3$d(0, %1$s + %2$s)",
    .vec_store = "vstore%4$d(%3$s, 0, %1$s + %2$s);",
    .shuffle = false,
};

const cg_dialect_t *cg_dialect_for(cg_target_t t) {
  switch (t) {
  case CG_TARGET_C: return &dialect_c;
  case CG_TARGET_CUDA: return &dialect_cuda;
  case CG_TARGET_OPENCL: return &dialect_opencl;
  }
  return NULL;
}
