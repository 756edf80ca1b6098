/* target.h — target descriptions: what a kernel is compiled for and the
 * limits a candidate must respect.  Targets are JSON files under configs/
 * (configs/nvidia/tesla-t4.json, configs/cpu/local.json, ...) with the same
 * entries built in, so the tools work without a source tree.  Prefix: tn_. */
#ifndef TUNED_TARGET_H
#define TUNED_TARGET_H

#include "common.h"

/* TN_TARGET_CUDA_HOST: CUDA C, compiled as C++ with tuned's harness
 * (measure/cuda_host.h) and run on the host CPU, to check what the CUDA code
 * generator emits where no GPU is (its times mean nothing). */
typedef enum tn_target_kind { TN_TARGET_CPU, TN_TARGET_OPENCL, TN_TARGET_CUDA, TN_TARGET_CUDA_HOST } tn_target_kind_t;

typedef struct tn_target {
  char name[64];      /* "nvidia/tesla-t4", "cpu", "opencl/pocl-cpu" */
  tn_target_kind_t kind;
  char arch[16];      /* CUDA: "sm_75"; CPU: "native"; OpenCL: "" */
  char device[96];    /* human-readable device name */
  int max_threads_per_block;      /* GPU-style targets (CUDA, OpenCL) */
  int64_t max_shared_memory_per_block; /* bytes */
  int max_registers_per_thread;
  int64_t max_registers_per_block;
  int warp_size;
  int max_vector_bytes;           /* widest vector load/store */
  int sm_count;                   /* CUDA SMs / OpenCL compute units */
  int num_cores;                  /* CPU cores (0: detect at run time) */
  double peak_gflops;             /* float32, non-tensor; 0 if unknown */
  double peak_gbps;               /* memory bandwidth; 0 if unknown */
  /* CUDA: shared memory per block a kernel may opt into (dynamic shared
   * memory with cuFuncSetAttribute); 0: max_shared_memory_per_block only */
  int64_t max_shared_memory_per_block_optin;
} tn_target_t;

/* The most shared memory a kernel of the target may use per block. */
int64_t tn_target_shared_limit(const tn_target_t *t);

const char *tn_target_kind_name(tn_target_kind_t k); /* "cpu", "opencl", "cuda", "cuda-host" */

/* Looks a target up by name: "cpu" (the local CPU, cores detected), the
 * built-in table, then configs/NAME.json under `config_dir` (may be NULL).
 * Unknown names give an error that lists the known targets. */
int tn_target_lookup(const char *name, const char *config_dir, tn_target_t *out, tn_err_t *err);
/* Parses a target JSON object (the configs/ format). */
int tn_target_from_json(const char *text, size_t len, tn_target_t *out, tn_err_t *err);
/* Writes the target as a JSON object (malloc'ed). */
char *tn_target_to_json(const tn_target_t *t);
/* Names of the built-in targets, NULL-terminated. */
const char *const *tn_target_builtin_names(void);

#endif
