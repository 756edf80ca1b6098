/* hopper_source.c — prints the Hopper primitives' CUDA text (codegen/hopper.c,
 * the same text tuned puts in front of a Hopper kernel) for wgmma widths
 * 64, 128 and 256, so that scripts/bundle can ship it to a GPU machine where
 * bench/gpu/hopper_check.cu is built with it by nvcc (scripts/gpu-check). */
#include <stdio.h>

#include "codegen/codegen.h"

int main(void) {
  static const int ns[] = {64, 128, 256};
  tn_buf_t b;
  tn_buf_init(&b);
  tn_err_t err = {0};
  if (cg_hopper_helpers(&b, ns, 3, &err) < 0) {
    fprintf(stderr, "hopper_source: %s\n", err.msg);
    return 1;
  }
  fputs(tn_buf_str(&b), stdout);
  tn_buf_free(&b);
  return 0;
}
