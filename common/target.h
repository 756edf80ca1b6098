/* target.h — target descriptions: what a kernel is compiled for and the
 * limits a candidate must respect.  Every target is a JSON file in the
 * config directory (configs/ of the source tree, installed under
 * DATADIR/tuned/configs): configs/cpu.json, configs/nvidia/tesla-t4.json, ...
 * There is no built-in table.  Prefix: tn_. */
#ifndef TUNED_TARGET_H
#define TUNED_TARGET_H

#include "common.h"

struct cJSON;

/* TN_TARGET_CUDA_HOST: CUDA C, compiled as C++ with tuned's harness
 * (measure/cuda_host.h) and run on the host CPU, to check what the CUDA code
 * generator emits where no GPU is (its times mean nothing). */
typedef enum tn_target_kind { TN_TARGET_CPU, TN_TARGET_OPENCL, TN_TARGET_CUDA, TN_TARGET_CUDA_HOST } tn_target_kind_t;

typedef struct tn_target {
  char name[64];      /* "nvidia/tesla-t4", "cpu", "opencl/pocl-cpu": the file's path under the config directory */
  tn_target_kind_t kind;
  char arch[16];      /* CUDA: "sm_75"; CPU: "native"; OpenCL: "" */
  char device[96];    /* the device's name (a CUDA target is usable where the driver reports it) */
  int max_threads_per_block;      /* GPU-style targets (CUDA, OpenCL) */
  int64_t max_shared_memory_per_block; /* bytes */
  int max_registers_per_thread;
  int64_t max_registers_per_block;
  int warp_size;
  int max_warps_per_sm;           /* GPU: warps an SM holds at once (occupancy); 0 unknown */
  int max_blocks_per_sm;          /* GPU: blocks an SM holds at once (occupancy); 0 unknown */
  int max_vector_bytes;           /* widest vector load/store */
  int num_cores;                  /* CPU cores (0: detect at run time) */
  int sm_count;                   /* GPU streaming multiprocessors (a persistent grid's CTAs); 0 unknown */
  double peak_gflops;             /* float32, non-tensor; 0 if unknown (no roofline) */
  double peak_gbps;               /* memory bandwidth; 0 if unknown (no roofline) */
  /* CUDA: shared memory per block a kernel may opt into (dynamic shared
   * memory with cuFuncSetAttribute); 0: max_shared_memory_per_block only */
  int64_t max_shared_memory_per_block_optin;
  /* cpu and cuda-host: the compiler family that builds candidates, "gcc"
   * (gcc / g++), "clang" (clang / clang++) or "auto" (the system's cc / c++);
   * "" for the other kinds.  $TUNED_CC / $TUNED_CXX replace it with any
   * command (measure/build_cc.c). */
  char cc[8];
  /* CUDA and cuda-host: float32 matmuls may run on tensor cores in TF32
   * (operands rounded to 10 bits of mantissa, outputs checked at TF32's
   * tolerance).  Off unless the target is named "<name>+tf32", as PyTorch
   * keeps it off unless asked; such records are kept under that name. */
  bool allow_tf32;
} tn_target_t;

/* Whether targets of this kind are built by a host compiler (cpu, cuda-host). */
bool tn_target_uses_cc(tn_target_kind_t k);
/* Sets t->cc to "gcc", "clang" or "auto"; TN_EINVAL naming the value and the
 * choices otherwise, or for a kind that has no host compiler. */
int tn_target_set_cc(tn_target_t *t, const char *cc, tn_err_t *err);

/* Whether the target is Hopper with its architecture-specific features
 * (wgmma, mbarrier transaction counts, TMA: code built for sm_90a): a cuda
 * target of arch sm_90 or sm_90a, or a cuda-host target whose "arch" says
 * sm_90a (the harness then stands in for an H100/H200, as cuda-host/hopper). */
bool tn_target_is_hopper(const tn_target_t *t);

/* The most shared memory a kernel of the target may use per block. */
int64_t tn_target_shared_limit(const tn_target_t *t);

const char *tn_target_kind_name(tn_target_kind_t k); /* "cpu", "opencl", "cuda", "cuda-host" */

/* Parses a target JSON object (the configs/ format). */
int tn_target_from_json(const char *text, size_t len, tn_target_t *out, tn_err_t *err);
/* Writes the target as a JSON object (malloc'ed). */
char *tn_target_to_json(const tn_target_t *t);

/* ---- where targets come from (configs.c) -------------------------------- */

/* The config directory of this process: $TUNED_CONFIG_DIR when set; else,
 * for an executable inside the meson build tree, the source tree's configs/;
 * else <exe dir>/../share/tuned/configs when it exists (an installed or
 * relocated copy, such as scripts/bundle's), else DATADIR/tuned/configs as
 * configured at build time.  The executable is /proc/self/exe; when it is
 * another program's (python loading libtuned_local), the same two places
 * are tried for the shared object this code is in (tn_self_object). */
int tn_config_dir(char *buf, size_t size, tn_err_t *err);
/* The resolved path of the executable or shared library this code was
 * linked into (dladdr); TN_EIO when the loader does not say. */
int tn_self_object(char *buf, size_t size);
/* The same choice for the executable at `exe` (a resolved path; NULL: none),
 * without $TUNED_CONFIG_DIR. */
int tn_config_dir_for(const char *exe, char *buf, size_t size, tn_err_t *err);

/* Reads the target NAME from config_dir/NAME.json (config_dir NULL: the
 * tn_config_dir() one).  "opencl" stands for "opencl/pocl-cpu".  The file's
 * "name" must be NAME.  Files and directories under config_dir must be
 * neither symbolic links nor another user's (root's are fine), and NAME may
 * not climb out (no "..").  An unknown name's error lists the known ones.
 * "NAME+tf32" is the CUDA (or cuda-host) target NAME with allow_tf32 set,
 * named so. */
int tn_target_lookup(const char *name, const char *config_dir, tn_target_t *out, tn_err_t *err);
/* The names of the target files under config_dir (NULL: tn_config_dir()),
 * sorted; *names is malloc'ed (tn_target_names_free). */
int tn_target_names(const char *config_dir, char ***names, int *n, tn_err_t *err);
void tn_target_names_free(char **names, int n);

/* ---- roofline ------------------------------------------------------------ */

/* Where a kernel that does `flops` float operations and moves `bytes` in
 * `secs` stands under the target's roofline. */
typedef struct tn_roofline {
  bool compute_bound; /* intensity at or above the ridge */
  double intensity;   /* FLOP per byte moved */
  double ridge;       /* peak_gflops / peak_gbps: the intensity where the bounds meet */
  double peak;        /* the bound's peak: GFLOP/s (compute-bound) or GB/s (memory-bound) */
  double achieved;    /* the kernel's rate in the same unit */
  double percent;     /* achieved / peak, in percent */
} tn_roofline_t;

/* Fills *r; false (and nothing to report) when the target has no peaks or
 * the kernel no time or no work. */
bool tn_target_roofline(const tn_target_t *t, double flops, double bytes, double secs, tn_roofline_t *r);
/* One line: "12.3% of the peak 66900 GFLOP/s (compute-bound: 170.7 FLOP/B,
 * ridge 20.0 FLOP/B)". */
void tn_roofline_text(const tn_roofline_t *r, char *buf, size_t size);
/* Adds r's fields to the JSON object obj: {"bound": "compute"|"memory",
 * "intensity", "ridge", "peak", "peak_unit", "achieved", "percent_of_peak"}. */
void tn_roofline_add_json(const tn_roofline_t *r, struct cJSON *obj);

#endif
