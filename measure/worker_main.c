/* worker_main.c — entry point of tuned-worker, the process in which the
 * measurement runner executes candidate kernels (see worker.c). */
#include "worker.h"

#if defined(__SANITIZE_ADDRESS__)
/* A sanitizer build (-Db_sanitize=address): a candidate that faults must end
 * the worker by its signal, as in a plain build, so that the runner reports
 * the candidate's crash (SIGSEGV, SIGBUS, SIGFPE) and respawns the worker;
 * ASan's own handlers would turn it into a report and exit status 1.  The
 * worker's own memory errors are still caught at the access, by ASan. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "handle_segv=0:handle_sigbus=0:handle_sigfpe=0"; }
#endif

int main(int argc, char **argv) { return wk_main(argc, argv); }
