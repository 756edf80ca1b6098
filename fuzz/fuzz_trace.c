/* fuzz_trace.c — libFuzzer entry point for trace JSON and replay: each input
 * is a trace file, parsed, re-serialised and replayed on matmul and
 * vector_add with the checks of tests/fuzzcheck_trace.h; a failed check
 * aborts so that libFuzzer keeps the input as a crash. */
#include <stdint.h>

#include "tests/fuzzcheck_trace.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static target_t targets[FZC_NTARGETS];

static void free_targets(void) { fzc_trace_targets_free(targets); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  if (fzc_trace_targets(targets) != 0) abort();
  atexit(free_targets);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  bytes_t in = {(char *)data, size, size};
  stats_t st = {0};
  /* The replay seed comes from the input: the same input replays the same way. */
  uint64_t seed = UINT64_C(1469598103934665603);
  for (size_t i = 0; i < size; i++) seed = (seed ^ data[i]) * UINT64_C(1099511628211);
  fzc_trace_one(targets, FZC_NTARGETS, &in, seed, &st);
  if (st.failures) abort();
  return 0;
}
