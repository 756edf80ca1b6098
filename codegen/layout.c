/* layout.c — how a buffer is laid out in generated code: row-major over its
 * storage extents (the region used, for sized buffers), with the strides a
 * storage_align annotation pads (IR_ANN_STORAGE_ALIGN on the block writing
 * the buffer); and which root nests are hoisted packing (IR_ANN_HOIST_PACKING),
 * printed as functions of their own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  if (cb->param && !cb->packs) return true; /* a GPU's global temporary: allocated by the harness as the IR says */
  cb->align_axis = axis;
  cb->align_factor = factor;
  cb->align_offset = offset;
  return true;
}

void cg_layout_analyse(cg_ctx_t *c) {
  for (int i = 0; i < c->nbufs; i++) c->bufs[i].align_axis = -1;
  ir_stmt_walk(c->f->root, align_visit, c);
}

typedef struct pack_find {
  const ir_block_t *blk;
  int nblocks;
} pack_find_t;

static bool pack_visit(ir_stmt_t *s, void *p) {
  pack_find_t *pf = p;
  if (s->kind != IR_S_BLOCK) return true;
  pf->nblocks++;
  if (ir_annot_get(s->u.block.annots, s->u.block.nannots, IR_ANN_HOIST_PACKING)) pf->blk = &s->u.block;
  return true;
}

/* The constant input a hoisted packing block copies, or NULL (failed). */
static const ir_buffer_t *pack_source(cg_ctx_t *c, const ir_block_t *b, int nblocks) {
  const ir_annot_t *a = ir_annot_get(b->annots, b->nannots, IR_ANN_HOIST_PACKING);
  if (c->d->target != CG_TARGET_C)
    return cg_fail(c, TN_EUNSUPPORTED, "block \"%s\": hoisted packing is supported on the C target only", b->name),
           NULL;
  if (nblocks != 1 || b->nreads != 1 || b->nwrites != 1 || !a->is_str || strcmp(a->sval, b->reads[0].buf->name) ||
      b->reads[0].buf->role != IR_BUF_INPUT || !b->reads[0].buf->is_const || b->writes[0].buf->role != IR_BUF_TEMP ||
      b->writes[0].buf->id < 0 || b->writes[0].buf->id >= c->nbufs)
    return cg_fail(c, TN_EINVAL,
                   "block \"%s\": hoist_packing needs a copy of a const input into a temporary, alone in its "
                   "root nest",
                   b->name),
           NULL;
  return b->reads[0].buf;
}

void cg_packing_analyse(cg_ctx_t *c) {
  c->pack_blk = tn_xcalloc((size_t)c->nroots + 1, sizeof *c->pack_blk);
  c->pack_fn = tn_xcalloc((size_t)c->nroots + 1, sizeof *c->pack_fn);
  for (int k = 0; k < c->nroots && !c->rc; k++) {
    pack_find_t pf = {0};
    ir_stmt_walk((ir_stmt_t *)c->roots[k], pack_visit, &pf);
    if (!pf.blk) continue;
    const ir_buffer_t *src = pack_source(c, pf.blk, pf.nblocks);
    if (!src) return;
    c->pack_blk[k] = pf.blk;
    c->pack_fn[k] = cg_name_unique(c, tn_arena_printf(c->scratch->arena, "%s_pack_%s", c->entry, src->name));
    c->bufs[pf.blk->writes[0].buf->id].packs = src;
  }
}
