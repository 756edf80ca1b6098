/* layout.c — storage_align: the stride of one dimension of a buffer a block
 * writes is padded to factor * n + offset elements (TVM's StorageAlign),
 * e.g. so that the rows of a packed panel do not all fall into one cache
 * set.  Recorded as the block annotation IR_ANN_STORAGE_ALIGN, which the
 * code generators read when they lay the buffer out; the IR's indices, and
 * so the reference evaluator, are unchanged. */
#include <stdio.h>

#include "sch_internal.h"

int sch_prim_storage_align(sch_t *s, int block_uid, int buffer_index, int axis, int64_t factor, int64_t offset,
                           tn_err_t *err) {
  ir_block_t *b = sch_find_block(s->f, block_uid);
  if (!b) return tn_err_set(err, TN_EINVAL, "the block no longer exists");
  if (buffer_index < 0 || buffer_index >= b->nwrites)
    return tn_err_set(err, TN_EINVAL, "block \"%s\" writes %d buffers; no write buffer %d", b->name, b->nwrites,
                      buffer_index);
  const ir_buffer_t *buf = b->writes[buffer_index].buf;
  if (buf->role != IR_BUF_TEMP)
    return tn_err_set(err, TN_EINVAL, "buffer %s is a parameter: its layout is the caller's", buf->name);
  if (axis < 0 || axis >= buf->ndim - 1)
    return tn_err_set(err, TN_EINVAL, "buffer %s has %d dimensions; axis %d has no stride to pad (0 .. %d)",
                      buf->name, buf->ndim, axis, buf->ndim - 2);
  if (factor < 1 || factor > (1 << 20) || offset < 0 || offset >= factor)
    return tn_err_set(err, TN_EINVAL, "factor %lld and offset %lld: need 1 <= factor <= 2^20 and 0 <= offset < factor",
                      (long long)factor, (long long)offset);
  char v[96];
  snprintf(v, sizeof v, "%d:%lld:%lld", axis, (long long)factor, (long long)offset);
  ir_annot_set_str(s->f, &b->annots, &b->nannots, IR_ANN_STORAGE_ALIGN, v);
  return TN_OK;
}
