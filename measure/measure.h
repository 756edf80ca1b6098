/* measure.h — builders, runners and verification of candidate kernels.  Today:
 * probing which execution backends this build and this machine offer.
 * Prefix: ms_. */
#ifndef TUNED_MEASURE_H
#define TUNED_MEASURE_H

#include "common/common.h"

typedef enum ms_backend {
  MS_BACKEND_CPU,    /* C compiled with the system compiler, run on the host */
  MS_BACKEND_OPENCL, /* OpenCL C (PoCL on machines without a GPU) */
  MS_BACKEND_CUDA,   /* CUDA C through NVRTC and the driver API */
  MS_BACKEND__COUNT
} ms_backend_t;

typedef struct ms_backend_status {
  bool compiled;  /* this build has the backend's code */
  bool available; /* and the machine can run it now */
  char detail[256]; /* device or reason, e.g. "libcuda.so.1: cannot open shared object file" */
} ms_backend_status_t;

const char *ms_backend_name(ms_backend_t b); /* "cpu", "opencl", "cuda" */

/* Probes a backend without side effects beyond loading libraries.  The CUDA
 * driver is loaded with dlopen (path from $TUNED_CUDA_DRIVER, default
 * "libcuda.so.1"); libcuda is never linked. */
void ms_backend_probe(ms_backend_t b, ms_backend_status_t *st);

#endif
