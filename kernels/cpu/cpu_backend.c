/* cpu_backend.c — the CPU back-end: its ops table, host memory ops and
 * td_kernels_cpu_create. The CPU kernels are the reference every other
 * back-end is tested against. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

/* Host memory: td_alloc gives zeroed, 64-byte (≥2 MiB: huge-page) aligned. */
static td_status cpu_alloc(td_kernels *k, void **out, size_t bytes, const char *what) {
  TD_CHECK(td_alloc(out, bytes, what));
  return TD_OK;
}

static void cpu_free(td_kernels *k, void *p) { td_free(p); }

static td_status cpu_zero(td_kernels *k, void *p, size_t bytes) {
  if (bytes) memset(p, 0, bytes);
  return TD_OK;
}

static td_status cpu_copy(td_kernels *k, void *dst, const void *src, size_t bytes) {
  if (bytes && dst != src) memcpy(dst, src, bytes);
  return TD_OK;
}

static td_status cpu_sync(td_kernels *k) { return TD_OK; }

static void cpu_destroy(td_kernels *k) {
  if (!k) return;
  td_cpu_state *s = k->state;
  if (s) {
    td_cpu_mm_cache_clear(s);
    td_cpu_mm_engine_destroy(s);
    td_free(s->buckets);
    td_free(s->scratch);
    td_free(s->widen);
    td_free(s->rope);
    td_free(s->flash);
    td_free(s->flash_thr);
    td_free(s);
  }
  td_free(k);
}

int td_kernels_cpu_bf16(void) { return td_cpu_mm_engine_bf16; }

/* Test-only (TD_TEST_STAGED=1; td_error.h lists the TD_TEST_* switches):
 * the back-end says its memory is not host memory, so every MPI call on its
 * buffers goes through the host staging a device back-end needs, testable
 * without a GPU. to_host and to_device stay memcpy: the numbers are the
 * same bits. Staging changes local copies only, never which collectives run,
 * so it is safe when set on some ranks only. Never set it outside tests. */
int td_kernels_cpu_host_memory(void) {
  const char *e = getenv("TD_TEST_STAGED");
  return !(e && strcmp(e, "1") == 0);
}

td_status td_cpu_grow(void **buf, size_t *bytes, size_t need, const char *what) {
  if (need <= *bytes) return TD_OK;
  td_free(*buf);
  *buf = NULL, *bytes = 0;
  TD_CHECK(td_alloc(buf, need, what));
  *bytes = need;
  return TD_OK;
}

td_status td_kernels_cpu_create(int threads, td_kernels **out) {
  td_status st = TD_OK;
  td_kernels *k = NULL;
  td_cpu_state *s = NULL;
  *out = NULL;
  if (threads < 0)
    TD_FAIL(TD_ERR_USAGE, "CPU back-end: threads must be >= 0, got %d", threads);
  /* The thread count is set before any matmul plan exists: oneDNN sizes its
   * primitives by the OpenMP thread count at creation. */
  if (threads > 0) omp_set_num_threads(threads);

  TD_CHECK_GOTO(td_alloc((void **)&k, sizeof *k, "CPU back-end ops table"));
  TD_CHECK_GOTO(td_alloc((void **)&s, sizeof *s, "CPU back-end state"));
  k->state = s;
  s->threads = omp_get_max_threads();
  s->nbuckets = 64;
  TD_CHECK_GOTO(td_alloc((void **)&s->buckets, (size_t)s->nbuckets * sizeof *s->buckets,
                         "CPU matmul plan cache"));
  TD_CHECK_GOTO(td_cpu_mm_engine_create(s));

  k->name = "cpu";
  k->host_memory = td_kernels_cpu_host_memory(); /* 1 unless TD_TEST_STAGED=1 */
  k->matmul_name = td_cpu_mm_engine_name;
  k->bf16_matmul = s->bf16;
  k->alloc = cpu_alloc;
  k->free = cpu_free;
  k->zero = cpu_zero;
  k->to_host = cpu_copy;
  k->to_device = cpu_copy;
  k->sync = cpu_sync;
  k->cast = td_cpu_cast;
  k->copy2d = td_cpu_copy2d;
  k->gemm = td_cpu_gemm;
  k->bias_fwd = td_cpu_bias_fwd;
  k->bias_bwd = td_cpu_bias_bwd;
  k->embed_fwd = td_cpu_embed_fwd;
  k->embed_bwd = td_cpu_embed_bwd;
  k->layernorm_fwd = td_cpu_layernorm_fwd;
  k->layernorm_bwd = td_cpu_layernorm_bwd;
  k->attention_fwd = td_cpu_attention_fwd;
  k->attention_bwd = td_cpu_attention_bwd;
  k->rmsnorm_fwd = td_cpu_rmsnorm_fwd;
  k->rmsnorm_bwd = td_cpu_rmsnorm_bwd;
  k->rope = td_cpu_rope;
  k->swiglu_fwd = td_cpu_swiglu_fwd;
  k->swiglu_bwd = td_cpu_swiglu_bwd;
  k->gqa_fwd = td_cpu_gqa_fwd;
  k->gqa_bwd = td_cpu_gqa_bwd;
  k->flash_fwd = td_cpu_flash_fwd;
  k->flash_bwd = td_cpu_flash_bwd;
  k->gelu_fwd = td_cpu_gelu_fwd;
  k->gelu_bwd = td_cpu_gelu_bwd;
  k->add = td_cpu_add;
  k->scale = td_cpu_scale;
  k->sumsq = td_cpu_sumsq;
  k->xent_rowmax = td_cpu_xent_rowmax;
  k->xent_sumexp = td_cpu_xent_sumexp;
  k->xent_bwd = td_cpu_xent_bwd;
  k->adamw = td_cpu_adamw;
  k->moe_route = td_cpu_moe_route;
  k->moe_plan = td_cpu_moe_plan;
  k->moe_gather = td_cpu_moe_gather;
  k->moe_combine = td_cpu_moe_combine;
  k->moe_combine_bwd = td_cpu_moe_combine_bwd;
  k->moe_scatter = td_cpu_moe_scatter;
  k->moe_route_bwd = td_cpu_moe_route_bwd;
  k->destroy = cpu_destroy;
  *out = k;
  k = NULL;
done:
  cpu_destroy(k); /* NULL on success; on failure frees what k->state holds */
  return st;
}
