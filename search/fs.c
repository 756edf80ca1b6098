/* fs.c — scratch directories of a tuning run: removal of build directories
 * and of the run's temporary work dir. */
#include <ftw.h>
#include <stdio.h>

#include "search/srch_batch.h"

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  remove(path);
  return 0;
}

void srch_rm_tree(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }
