/* bench_eval.c — times the reference evaluator on a workload (default
 * workloads/matmul.tw): the fast path at the workload's parameters, and the
 * fast and scalar paths on a small instance as a baseline.  See README.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/ir.h"
#include "tuned_config.h"

#define DATA_LIMIT ((size_t)8 << 30)

typedef struct run {
  const char *label;
  double elements, flops, data_s, eval_s, eval_cpu_s;
  ir_eval_stats_t st;
  ir_data_t *data;
} run_t;

static int usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s [WORKLOAD.tw] [--set NAME=VALUE]... [--small N]\n"
          "  times ir_data_new + ir_eval at the workload's parameters (fast path), then\n"
          "  the fast and scalar paths with every parameter capped at N (default 128)\n",
          argv0);
  return 2;
}

/* Loads the workload, evaluates it and fills r (keeps r->data for comparison). */
static int run_once(const char *path, const ir_param_set_t *sets, int nsets, bool scalar, run_t *r,
                    tn_err_t *err) {
  ir_workload_t *w;
  int rc = ir_workload_load(path, sets, nsets, &w, err);
  if (rc) return rc;
  const ir_func_t *f = w->func;
  r->elements = 0;
  for (int i = 0; i < f->nparams; i++)
    if (f->params[i]->role == IR_BUF_OUTPUT) r->elements += (double)ir_buffer_numel(f->params[i]);
  r->flops = ir_func_flops(f);
  double t0 = tn_now();
  rc = ir_data_new(f, 1, DATA_LIMIT, &r->data, err);
  double t1 = tn_now(), c1 = (double)clock() / CLOCKS_PER_SEC;
  if (!rc) rc = ir_eval_opts(f, r->data, scalar, &r->st, err);
  double t2 = tn_now(), c2 = (double)clock() / CLOCKS_PER_SEC;
  r->eval_cpu_s = c2 - c1;
  r->data_s = t1 - t0;
  r->eval_s = t2 - t1;
  ir_workload_free(w);
  return rc;
}

static void print_row(const char *name, const run_t *r) {
  double lanes = (double)r->st.fast_iters, all = lanes + (double)r->st.scalar_iters;
  printf("%-28s %-7s %12.0f %9.3f %9.3f %9.3f %9.3f %13.1f%%\n", name, r->label, r->elements,
         r->data_s, r->eval_s, r->eval_cpu_s, r->flops / r->eval_s / 1e9,
         all > 0 ? 100.0 * lanes / all : 0.0);
}

/* Caps every parameter of the workload at `small`. */
static int small_sets(const char *path, int64_t small, ir_param_set_t **out, int *n,
                      tn_err_t *err) {
  ir_workload_t *w;
  int rc = ir_workload_load(path, NULL, 0, &w, err);
  if (rc) return rc;
  *out = calloc((size_t)w->nparams + 1, sizeof **out);
  *n = w->nparams;
  for (int i = 0; i < w->nparams; i++) {
    (*out)[i].name = strdup(w->params[i].name);
    (*out)[i].value = w->params[i].value < small ? w->params[i].value : small;
  }
  ir_workload_free(w);
  return TN_OK;
}

static bool same_outputs(const ir_data_t *a, const ir_data_t *b) {
  for (int i = 0; i < a->n; i++)
    if (memcmp(a->vals[i], b->vals[i], sizeof(double) * (size_t)a->sizes[i]) != 0) return false;
  return true;
}

int main(int argc, char **argv) {
  const char *path = TUNED_SOURCE_ROOT "/workloads/matmul.tw";
  ir_param_set_t sets[32];
  int nsets = 0;
  int64_t small = 128;
  tn_arena_t *arena = tn_arena_new();
  tn_err_t err = {0};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--set") == 0 && i + 1 < argc && nsets < 32) {
      if (ir_param_set_parse(argv[++i], arena, &sets[nsets++], &err)) {
        fprintf(stderr, "bench_eval: %s\n", err.msg);
        return 2;
      }
    } else if (strcmp(argv[i], "--small") == 0 && i + 1 < argc) {
      small = atoll(argv[++i]);
    } else if (argv[i][0] == '-') {
      return usage(argv[0]);
    } else {
      path = argv[i];
    }
  }
  ir_param_set_t *ssets = NULL;
  int nssets = 0;
  run_t big = {.label = "fast"}, sfast = {.label = "fast"}, sscalar = {.label = "scalar"};
  int rc = run_once(path, sets, nsets, false, &big, &err);
  if (!rc) rc = small_sets(path, small, &ssets, &nssets, &err);
  if (!rc) rc = run_once(path, ssets, nssets, false, &sfast, &err);
  if (!rc) rc = run_once(path, ssets, nssets, true, &sscalar, &err);
  if (rc) {
    fprintf(stderr, "bench_eval: %s: %s\n", path, err.msg);
    return 1;
  }
  char small_name[64];
  snprintf(small_name, sizeof small_name, "small (params <= %lld)", (long long)small);
  printf("workload: %s\n", path);
  printf("%-28s %-7s %12s %9s %9s %9s %9s %14s\n", "instance", "path", "out-elems", "data-s",
         "eval-s", "eval-cpu", "GFLOP/s", "lane-wise");
  print_row("default params", &big);
  print_row(small_name, &sfast);
  print_row(small_name, &sscalar);
  printf("fast/scalar speed-up on the small instance: %.1fx; outputs bit-identical: %s\n",
         sscalar.eval_s / sfast.eval_s, same_outputs(sfast.data, sscalar.data) ? "yes" : "NO");
  bool ok = same_outputs(sfast.data, sscalar.data);
  ir_data_free(big.data);
  ir_data_free(sfast.data);
  ir_data_free(sscalar.data);
  for (int i = 0; i < nssets; i++) free((char *)ssets[i].name);
  free(ssets);
  tn_arena_free(arena);
  return ok ? 0 : 1;
}
