/* matmul_cblas.c — the matmul engine on CBLAS cblas_sgemm (OpenBLAS), used
 * when trident is built without oneDNN. A td_cpu_mm is one sgemm per batch
 * entry; an operand with column stride 1 is passed as is (ld = row stride),
 * one with row stride 1 as transposed (ld = column stride). There is nothing
 * to plan, so impl is NULL and the scratchpad 0 bytes. */
#ifndef TD_HAVE_DNNL

#include <cblas.h>
#include <stdint.h>

#include "kernels/cpu/cpu_internal.h"

const char td_cpu_mm_engine_name[] = "cblas";
const int td_cpu_mm_engine_bf16 = 0; /* sgemm only: bf16 is refused (td_kernels_precision_ok) */

td_status td_cpu_mm_engine_create(td_cpu_state *s) {
  /* OpenBLAS keeps its own thread pool: give it the back-end's count. */
  openblas_set_num_threads(s->threads);
  s->engine = NULL;
  s->bf16 = 0;
  return TD_OK;
}

void td_cpu_mm_engine_destroy(td_cpu_state *s) { s->engine = NULL; }

/* Is an operand with strides st (rows, cols) expressible to sgemm? */
static int mm_layout(const int64_t st[4], int64_t rows, int64_t cols, CBLAS_TRANSPOSE *tr,
                     int64_t *ld) {
  *tr = CblasNoTrans;
  *ld = 1;
  if (st[3] == 1 && st[2] >= (cols > 1 ? cols : 1)) {
    *tr = CblasNoTrans;
    *ld = st[2];
    return 1;
  }
  if (st[2] == 1 && st[3] >= (rows > 1 ? rows : 1)) {
    *tr = CblasTrans;
    *ld = st[3];
    return 1;
  }
  return 0;
}

td_status td_cpu_mm_impl_create(td_cpu_state *s, const td_cpu_mm *d, void **impl,
                                size_t *scratch_bytes) {
  CBLAS_TRANSPOSE ta, tb, tc;
  int64_t la, lb, lc;
  *impl = NULL;
  *scratch_bytes = 0;
  TD_REQUIRE(mm_layout(d->sa, d->M, d->K, &ta, &la) &&
                 mm_layout(d->sb, d->K, d->N, &tb, &lb) &&
                 mm_layout(d->sc, d->M, d->N, &tc, &lc) && tc == CblasNoTrans,
             TD_ERR_INTERNAL, "matmul: strides not expressible as sgemm");
  TD_REQUIRE(d->M <= INT32_MAX && d->N <= INT32_MAX && d->K <= INT32_MAX &&
                 la <= INT32_MAX && lb <= INT32_MAX && lc <= INT32_MAX,
             TD_ERR_UNSUPPORTED, "matmul: sizes beyond 32-bit CBLAS (M=%lld N=%lld K=%lld)",
             (long long)d->M, (long long)d->N, (long long)d->K);
  return TD_OK;
}

void td_cpu_mm_impl_destroy(void *impl) { (void)impl; }

td_status td_cpu_mm_impl_run(td_cpu_state *s, void *impl, const td_cpu_mm *d,
                             const void *Av, const void *Bv, void *Cv, void *scratch) {
  const float *A = Av, *B = Bv;
  float *C = Cv;
  CBLAS_TRANSPOSE ta = CblasNoTrans, tb = CblasNoTrans, tc = CblasNoTrans;
  int64_t la = 1, lb = 1, lc = 1;
  mm_layout(d->sa, d->M, d->K, &ta, &la);
  mm_layout(d->sb, d->K, d->N, &tb, &lb);
  mm_layout(d->sc, d->M, d->N, &tc, &lc);
  for (int64_t b0 = 0; b0 < d->batch0; b0++)
    for (int64_t b1 = 0; b1 < d->batch1; b1++)
      cblas_sgemm(CblasRowMajor, ta, tb, (blasint)d->M, (blasint)d->N, (blasint)d->K,
                  d->alpha, A + b0 * d->sa[0] + b1 * d->sa[1], (blasint)la,
                  B + b0 * d->sb[0] + b1 * d->sb[1], (blasint)lb, d->beta,
                  C + b0 * d->sc[0] + b1 * d->sc[1], (blasint)lc);
  return TD_OK;
}

#endif /* !TD_HAVE_DNNL */
