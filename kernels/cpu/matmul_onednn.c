/* matmul_onednn.c — the matmul engine on oneDNN 2.x matmul primitives.
 *
 * All oneDNN-version-specific code of trident lives here (oneDNN 3.x
 * replaced dnnl_matmul_desc_init, memory-descriptor structs and output
 * scales): a td_cpu_mm becomes one primitive whose operands are plain
 * memory descriptors with the descriptor's strides, so transposes and
 * attention's per-head views need no copies. alpha ≠ 1 is an output scale,
 * beta = 1 a sum post-op; the scratchpad is user-managed (one buffer shared
 * by all primitives, see matmul.c). Memory objects are made once per
 * primitive and re-pointed at each call: nothing is allocated per call.
 * bf16 operands go to oneDNN's bf16 matmul when it has a real (not the
 * reference) implementation on this CPU (AVX512_BF16/AMX, or avx512_core
 * emulation); otherwise matmul.c widens them to float32. */
#ifdef TD_HAVE_DNNL

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

#if DNNL_VERSION_MAJOR != 2
#error "matmul_onednn.c is written for the oneDNN 2.x C API"
#endif

const char td_cpu_mm_engine_name[] = "onednn";
const int td_cpu_mm_engine_bf16 = 1;

typedef struct {
  dnnl_engine_t engine;
  dnnl_stream_t stream;
} dnnl_ctx;

typedef struct {
  dnnl_primitive_t prim;
  dnnl_memory_t a, b, c, sp; /* sp is NULL when no scratchpad is needed */
} dnnl_impl;

/* Turn a oneDNN status into a trident error naming the call. */
#define TD_DNNL_GOTO(call)                                                   \
  do {                                                                       \
    dnnl_status_t td__d = (call);                                            \
    if (td__d != dnnl_success)                                               \
      TD_FAIL_GOTO(TD_ERR_INTERNAL, "oneDNN: %s failed: %s", #call,          \
                   dnnl_status2str(td__d));                                  \
  } while (0)

/* Does oneDNN have a bf16 matmul on this CPU other than its reference code
 * (correct, but orders of magnitude slower than widening to float32)?
 * TD_CPU_BF16_MATMUL=widen forces the widened path (tests compare both). */
static int bf16_native(dnnl_engine_t engine) {
  const char *force = getenv("TD_CPU_BF16_MATMUL");
  if (force && strcmp(force, "widen") == 0) return 0;
  dnnl_memory_desc_t a, b, c;
  dnnl_matmul_desc_t mmd;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_dims_t da = {64, 64}, sa = {64, 1};
  const char *impl = NULL;
  int ok = dnnl_memory_desc_init_by_strides(&a, 2, da, dnnl_bf16, sa) == dnnl_success &&
           dnnl_memory_desc_init_by_strides(&b, 2, da, dnnl_bf16, sa) == dnnl_success &&
           dnnl_memory_desc_init_by_strides(&c, 2, da, dnnl_f32, sa) == dnnl_success &&
           dnnl_matmul_desc_init(&mmd, &a, &b, NULL, &c) == dnnl_success &&
           dnnl_primitive_desc_create(&pd, &mmd, NULL, engine, NULL) == dnnl_success &&
           dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
           impl && strstr(impl, "ref") == NULL;
  if (pd) dnnl_primitive_desc_destroy(pd);
  return ok;
}

td_status td_cpu_mm_engine_create(td_cpu_state *s) {
  td_status st = TD_OK;
  dnnl_ctx *c = NULL;
  TD_CHECK_GOTO(td_alloc((void **)&c, sizeof *c, "oneDNN engine"));
  TD_DNNL_GOTO(dnnl_engine_create(&c->engine, dnnl_cpu, 0));
  TD_DNNL_GOTO(dnnl_stream_create(&c->stream, c->engine, dnnl_stream_default_flags));
  s->bf16 = bf16_native(c->engine) ? 2 : 1;
  s->engine = c;
  c = NULL;
done:
  if (c) {
    if (c->stream) dnnl_stream_destroy(c->stream);
    if (c->engine) dnnl_engine_destroy(c->engine);
    td_free(c);
  }
  return st;
}

void td_cpu_mm_engine_destroy(td_cpu_state *s) {
  dnnl_ctx *c = s->engine;
  if (!c) return;
  if (c->stream) dnnl_stream_destroy(c->stream);
  if (c->engine) dnnl_engine_destroy(c->engine);
  td_free(c);
  s->engine = NULL;
}

/* A plain memory descriptor (rows, cols) with strides st[2..3], batched as
 * (batch0, batch1, rows, cols) with strides st[0..3] when either batch > 1. */
static dnnl_status_t mm_md(dnnl_memory_desc_t *md, const td_cpu_mm *d, int64_t rows,
                           int64_t cols, const int64_t st[4], int32_t dt) {
  dnnl_data_type_t t = dt == TD_DTYPE_BF16 ? dnnl_bf16 : dnnl_f32;
  if (d->batch0 == 1 && d->batch1 == 1) {
    dnnl_dims_t dims = {rows, cols}, strides = {st[2], st[3]};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, t, strides);
  }
  dnnl_dims_t dims = {d->batch0, d->batch1, rows, cols};
  dnnl_dims_t strides = {st[0], st[1], st[2], st[3]};
  return dnnl_memory_desc_init_by_strides(md, 4, dims, t, strides);
}

void td_cpu_mm_impl_destroy(void *impl) {
  dnnl_impl *p = impl;
  if (!p) return;
  if (p->prim) dnnl_primitive_destroy(p->prim);
  if (p->a) dnnl_memory_destroy(p->a);
  if (p->b) dnnl_memory_destroy(p->b);
  if (p->c) dnnl_memory_destroy(p->c);
  if (p->sp) dnnl_memory_destroy(p->sp);
  td_free(p);
}

td_status td_cpu_mm_impl_create(td_cpu_state *s, const td_cpu_mm *d, void **impl,
                                size_t *scratch_bytes) {
  td_status st = TD_OK;
  dnnl_ctx *c = s->engine;
  dnnl_impl *p = NULL;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_memory_desc_t amd, bmd, cmd;
  dnnl_matmul_desc_t mmd;
  *impl = NULL;
  *scratch_bytes = 0;
  TD_REQUIRE(d->sc[3] == 1, TD_ERR_INTERNAL, "matmul: C must have column stride 1");

  TD_CHECK_GOTO(td_alloc((void **)&p, sizeof *p, "oneDNN matmul primitive"));
  TD_DNNL_GOTO(mm_md(&amd, d, d->M, d->K, d->sa, d->at));
  TD_DNNL_GOTO(mm_md(&bmd, d, d->K, d->N, d->sb, d->bt));
  TD_DNNL_GOTO(mm_md(&cmd, d, d->M, d->N, d->sc, d->ct));
  TD_DNNL_GOTO(dnnl_matmul_desc_init(&mmd, &amd, &bmd, NULL, &cmd));

  TD_DNNL_GOTO(dnnl_primitive_attr_create(&attr));
  TD_DNNL_GOTO(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
  if (d->alpha != 1.0f)
    TD_DNNL_GOTO(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &d->alpha));
  if (d->beta != 0.0f) { /* C = alpha·A·B + 1·C */
    TD_DNNL_GOTO(dnnl_post_ops_create(&po));
    TD_DNNL_GOTO(dnnl_post_ops_append_sum(po, 1.0f));
    TD_DNNL_GOTO(dnnl_primitive_attr_set_post_ops(attr, po));
  }
  TD_DNNL_GOTO(dnnl_primitive_desc_create(&pd, &mmd, attr, c->engine, NULL));
  TD_DNNL_GOTO(dnnl_primitive_create(&p->prim, pd));

  TD_DNNL_GOTO(dnnl_memory_create(&p->a, &amd, c->engine, DNNL_MEMORY_NONE));
  TD_DNNL_GOTO(dnnl_memory_create(&p->b, &bmd, c->engine, DNNL_MEMORY_NONE));
  TD_DNNL_GOTO(dnnl_memory_create(&p->c, &cmd, c->engine, DNNL_MEMORY_NONE));
  const dnnl_memory_desc_t *spmd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  size_t spb = spmd ? dnnl_memory_desc_get_size(spmd) : 0;
  if (spb > 0) TD_DNNL_GOTO(dnnl_memory_create(&p->sp, spmd, c->engine, DNNL_MEMORY_NONE));
  *scratch_bytes = spb;
  *impl = p;
  p = NULL;
done:
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  td_cpu_mm_impl_destroy(p);
  return st;
}

td_status td_cpu_mm_impl_run(td_cpu_state *s, void *impl, const td_cpu_mm *d,
                             const void *A, const void *B, void *C, void *scratch) {
  td_status st = TD_OK;
  dnnl_ctx *c = s->engine;
  dnnl_impl *p = impl;
  dnnl_exec_arg_t args[4];
  int nargs = 3;
  TD_DNNL_GOTO(dnnl_memory_set_data_handle(p->a, (void *)A));
  TD_DNNL_GOTO(dnnl_memory_set_data_handle(p->b, (void *)B));
  TD_DNNL_GOTO(dnnl_memory_set_data_handle(p->c, C));
  args[0].arg = DNNL_ARG_SRC;
  args[0].memory = p->a;
  args[1].arg = DNNL_ARG_WEIGHTS;
  args[1].memory = p->b;
  args[2].arg = DNNL_ARG_DST;
  args[2].memory = p->c;
  if (p->sp) {
    TD_DNNL_GOTO(dnnl_memory_set_data_handle(p->sp, scratch));
    args[3].arg = DNNL_ARG_SCRATCHPAD;
    args[3].memory = p->sp;
    nargs = 4;
  }
  TD_DNNL_GOTO(dnnl_primitive_execute(p->prim, c->stream, nargs, args));
  TD_DNNL_GOTO(dnnl_stream_wait(c->stream));
done:
  return st;
}

#endif /* TD_HAVE_DNNL */
