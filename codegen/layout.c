/* layout.c — how a buffer is laid out in generated code: row-major over its
 * storage extents (the region used, for sized buffers), with the strides a
 * storage_align annotation pads (IR_ANN_STORAGE_ALIGN on the block writing
 * the buffer). */
#include <stdio.h>

#include "cg_internal.h"

int64_t cg_buf_strides(const cg_buf_t *cb, int64_t *stride) {
  int64_t s = 1;
  for (int d = cb->b->ndim - 1; d >= 0; d--) {
    if (d == cb->align_axis && cb->align_factor > 0) {
      int64_t r = s % cb->align_factor;
      s += (cb->align_offset - r + cb->align_factor) % cb->align_factor;
    }
    stride[d] = s;
    s *= cb->ext[d];
  }
  return s;
}

static bool align_visit(ir_stmt_t *s, void *p) {
  cg_ctx_t *c = p;
  if (s->kind != IR_S_BLOCK) return true;
  const ir_block_t *b = &s->u.block;
  const ir_annot_t *a = ir_annot_get(b->annots, b->nannots, IR_ANN_STORAGE_ALIGN);
  if (!a || b->nwrites < 1) return true;
  int axis = -1;
  long long factor = 0, offset = -1;
  const ir_buffer_t *buf = b->writes[0].buf;
  if (!a->is_str || sscanf(a->sval, "%d:%lld:%lld", &axis, &factor, &offset) != 3 || axis < 0 ||
      axis >= buf->ndim - 1 || factor < 1 || offset < 0 || offset >= factor || buf->id < 0 || buf->id >= c->nbufs) {
    cg_fail(c, TN_EINVAL, "block \"%s\": storage_align \"%s\" is not AXIS:FACTOR:OFFSET for %s", b->name,
            a->is_str ? a->sval : "", buf->name);
    return false;
  }
  cg_buf_t *cb = &c->bufs[buf->id];
  if (cb->param) return true; /* a GPU's global temporary: allocated by the harness as the IR says */
  cb->align_axis = axis;
  cb->align_factor = factor;
  cb->align_offset = offset;
  return true;
}

void cg_layout_analyse(cg_ctx_t *c) {
  for (int i = 0; i < c->nbufs; i++) c->bufs[i].align_axis = -1;
  ir_stmt_walk(c->f->root, align_visit, c);
}
