/* tuned.c — the tuning daemon's entry point.  This version reports which
 * backends the build and the machine offer; the socket service, job queue
 * and database come with the service milestone (see README). */
#include <stdio.h>
#include <string.h>

#include "measure/measure.h"
#include "tuned_config.h"

#if TUNED_HAVE_XGBOOST
#include <xgboost/c_api.h>
#endif

static void usage(FILE *out) {
  fprintf(out,
          "usage: tuned --backends\n"
          "       tuned --version | --help\n"
          "\n"
          "tuned is the auto-tuning daemon.  In this version it reports which execution\n"
          "backends (cpu, opencl, cuda) and which cost model this build and this machine\n"
          "offer; the long-running service (--target, --db, --socket) is not part of\n"
          "this version yet.  Use `tunectl show|check|eval` to work with workloads.\n"
          "\n"
          "  --backends   probe every backend and print whether it is usable, and why not\n"
          "  --version    print the version\n"
          "  -h, --help   show this help\n"
          "\n"
          "environment:\n"
          "  TUNED_CUDA_DRIVER  path of the CUDA driver library to dlopen (default libcuda.so.1)\n");
}

static int print_backends(void) {
  int usable = 0;
  for (int b = 0; b < MS_BACKEND__COUNT; b++) {
    ms_backend_status_t st;
    ms_backend_probe((ms_backend_t)b, &st);
    printf("%-8s %-12s %s\n", ms_backend_name((ms_backend_t)b),
           st.available ? "available" : "unavailable", st.detail);
    usable += st.available;
  }
#if TUNED_HAVE_XGBOOST
  int major, minor, patch;
  XGBoostVersion(&major, &minor, &patch);
  printf("%-8s %-12s XGBoost %d.%d.%d cost model\n", "xgboost", "available", major, minor, patch);
#else
  printf("%-8s %-12s built without XGBoost (install libxgboost-dev and rebuild); a random model "
         "will be used\n", "xgboost", "unavailable");
#endif
  return usable ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    usage(stdout);
    return 0;
  }
  if (argc == 2 && strcmp(argv[1], "--version") == 0) {
    printf("tuned %s\n", TUNED_VERSION);
    return 0;
  }
  if (argc == 2 && strcmp(argv[1], "--backends") == 0) return print_backends();
  fprintf(stderr, "tuned: %s%s\n", argc < 2 ? "missing option" : "unsupported option: ",
          argc < 2 ? "" : argv[1]);
  fprintf(stderr, "tuned: this version only reports backends (tuned --backends); the tuning "
                  "service is not built yet. See tuned --help.\n");
  return 2;
}
