/* fuzz_workload.c — libFuzzer entry point for the workload parser: each
 * input is a workload file; what the mutation fuzzer (tests/fuzz_parse.c)
 * checks is checked here (tests/fuzzcheck_parse.h), and a failed check
 * aborts so that libFuzzer keeps the input as a crash. */
#include <stdint.h>

#include "tests/fuzzcheck_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  bytes_t in = {(char *)data, size, size};
  stats_t st = {0};
  fzc_parse_one(&in, NULL, 0, &st);
  if (st.failures) abort();
  return 0;
}
