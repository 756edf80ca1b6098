/* worker_main.c — entry point of tuned-worker, the process in which the
 * measurement runner executes candidate kernels (see worker.c). */
#include "worker.h"

int main(int argc, char **argv) { return wk_main(argc, argv); }
