/* testutil.h — shared scaffolding for the Check suites: a main() that runs one
 * suite and paths to the source tree's fixtures. */
#ifndef TUNED_TESTUTIL_H
#define TUNED_TESTUTIL_H

#include <check.h>
#include <stdlib.h>

#include "tuned_config.h"

/* Absolute path of a file in the source tree: SRC("workloads/matmul.tw"). */
#define SRC(rel) TUNED_SOURCE_ROOT "/" rel

#define TN_TEST_MAIN(make_suite)                                  \
  int main(void) {                                                \
    SRunner *sr = srunner_create(make_suite());                   \
    srunner_run_all(sr, CK_NORMAL);                               \
    int failed = srunner_ntests_failed(sr);                       \
    srunner_free(sr);                                             \
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;                  \
  }

#endif
