/* matmul.cu — every product of the CUDA back-end, through cuBLASLt.
 *
 * trident's tensors are row-major; cuBLASLt's are column-major. A row-major
 * (r, c) matrix with row stride ld is the column-major (c, r) matrix with
 * leading dimension ld, so C = op(A)·op(B) (row-major) is computed as the
 * column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: cuBLASLt's first operand is our B, its
 * second our A, and no data moves.
 *
 * Precision: compute CUBLAS_COMPUTE_32F with float32 scale (never TF32): bf16
 * operands are multiplied exactly and accumulated in float32, as the CPU
 * back-end does; a bf16 C is rounded once. Operand combinations cuBLASLt has
 * no kernel for (one bf16 and one float32 operand, float32 operands into a
 * bf16 C) are widened to float32 in the workspace first — the same numbers,
 * as in the CPU back-end's widened path.
 *
 * Plans: the matrix layouts, the operation descriptor and the algorithm the
 * heuristic picked are made once per (shape, types, strides, beta, pointer
 * alignment) and cached; a step queries nothing. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.cuh"

/* The cache key: plain integers only (hashed and compared as bytes). */
typedef struct {
  int64_t M, N, K, lda, ldb, ldc, sA, sB, sC, batch;
  int32_t transA, transB, at, bt, ct;
  int32_t align_a, align_b, align_c; /* bytes every matrix of the batch is aligned to */
  int32_t beta_one;
  int32_t pad_;
} mm_key;

struct td_cuda_plan {
  mm_key key;
  uint64_t hash;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc; /* cuBLASLt's A (our B), B (our A), C and D */
  cublasLtMatmulAlgo_t algo;
  td_cuda_plan *next;
};

static uint64_t mm_hash(const mm_key *k) {
  const unsigned char *p = (const unsigned char *)k;
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static cudaDataType_t mm_type(int32_t t) {
  return t == TD_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* The largest power of two (≤ 256) dividing the address of every matrix of a
 * batch: base + i·stride elements of es bytes. */
static int32_t mm_align(const void *p, int64_t stride, int64_t batch, size_t es) {
  uint64_t a = (uint64_t)(uintptr_t)p | 256u;
  if (batch > 1) a |= (uint64_t)stride * es;
  return (int32_t)(a & (~a + 1));
}

static void plan_free(td_cuda_plan *p) {
  if (!p) return;
  if (p->la) cublasLtMatrixLayoutDestroy(p->la);
  if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
  if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
  if (p->op) cublasLtMatmulDescDestroy(p->op);
  free(p);
}

void td_cuda_plans_clear(td_cuda_state *s) {
  if (!s->plans) return;
  for (int64_t b = 0; b < s->nplans_buckets; b++) {
    td_cuda_plan *p = s->plans[b];
    while (p) {
      td_cuda_plan *n = p->next;
      plan_free(p);
      p = n;
    }
    s->plans[b] = NULL;
  }
  s->nplans = 0;
}

/* A column-major layout of `rows` × `cols`, leading dimension ld, batched. */
static td_status mm_layout(cublasLtMatrixLayout_t *out, int32_t t, int64_t rows,
                           int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  TD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(out, mm_type(t), (uint64_t)rows, (uint64_t)cols,
                                             ld));
  if (batch > 1) {
    int32_t bc = (int32_t)batch;
    TD_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                     &bc, sizeof bc));
    TD_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        *out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
  return TD_OK;
}

static td_status plan_make(td_cuda_state *s, const mm_key *k, td_cuda_plan *p) {
  cublasOperation_t opa = k->transB ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLASLt's A: our B */
  cublasOperation_t opb = k->transA ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLASLt's B: our A */
  cublasLtMatmulPreference_t pref = NULL;
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  td_status st = TD_OK;
  TD_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  TD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa,
                                                 sizeof opa));
  TD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb,
                                                 sizeof opb));
  /* our B stored row-major (N,K) when transposed, else (K,N): column-major
   * (K,N) or (N,K); our A stored (K,M) or (M,K): column-major (M,K) or (K,M) */
  TD_CHECK(mm_layout(&p->la, k->bt, k->transB ? k->K : k->N, k->transB ? k->N : k->K, k->ldb,
                     k->batch, k->sB));
  TD_CHECK(mm_layout(&p->lb, k->at, k->transA ? k->M : k->K, k->transA ? k->K : k->M, k->lda,
                     k->batch, k->sA));
  TD_CHECK(mm_layout(&p->lc, k->ct, k->N, k->M, k->ldc, k->batch, k->sC));

  TD_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  {
    uint64_t ws = s->lt_ws_bytes;
    uint32_t aa = (uint32_t)k->align_b, ab = (uint32_t)k->align_a, ac = (uint32_t)k->align_c;
    cublasStatus_t cs = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (cs == CUBLAS_STATUS_SUCCESS)
      cs = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                &aa, sizeof aa);
    if (cs == CUBLAS_STATUS_SUCCESS)
      cs = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                &ab, sizeof ab);
    if (cs == CUBLAS_STATUS_SUCCESS)
      cs = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                &ac, sizeof ac);
    if (cs == CUBLAS_STATUS_SUCCESS)
      cs = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                &ac, sizeof ac);
    if (cs != CUBLAS_STATUS_SUCCESS) {
      cublasLtMatmulPreferenceDestroy(pref);
      return td_cublas_fail(cs, "cublasLtMatmulPreferenceSetAttribute", __FILE__, __LINE__,
                            __func__);
    }
    cs = cublasLtMatmulAlgoGetHeuristic(s->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, 1, &res,
                                        &found);
    cublasLtMatmulPreferenceDestroy(pref);
    /* "no algorithm" is CUBLAS_STATUS_NOT_SUPPORTED from the heuristic (or
     * success with none returned): both get the message below */
    if (cs == CUBLAS_STATUS_NOT_SUPPORTED)
      found = 0;
    else if (cs != CUBLAS_STATUS_SUCCESS)
      return td_cublas_fail(cs, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__,
                            __func__);
  }
  TD_REQUIRE(found > 0, TD_ERR_UNSUPPORTED,
             "cuBLASLt has no algorithm for a %s·%s -> %s product M=%lld N=%lld K=%lld "
             "(transA %d, transB %d, batch %lld, alignment %d/%d/%d bytes)",
             k->at == TD_DTYPE_BF16 ? "bf16" : "fp32", k->bt == TD_DTYPE_BF16 ? "bf16" : "fp32",
             k->ct == TD_DTYPE_BF16 ? "bf16" : "fp32", (long long)k->M, (long long)k->N,
             (long long)k->K, k->transA, k->transB, (long long)k->batch, k->align_a,
             k->align_b, k->align_c);
  p->algo = res.algo;
  return st;
}

static td_status plan_get(td_cuda_state *s, const mm_key *k, td_cuda_plan **out) {
  uint64_t h = mm_hash(k);
  td_cuda_plan **head = &s->plans[h % (uint64_t)s->nplans_buckets];
  for (td_cuda_plan *p = *head; p; p = p->next)
    if (p->hash == h && memcmp(&p->key, k, sizeof *k) == 0) {
      *out = p;
      return TD_OK;
    }
  td_cuda_plan *p = (td_cuda_plan *)calloc(1, sizeof *p);
  TD_REQUIRE(p != NULL, TD_ERR_NOMEM, "CUDA matmul: no host memory for a plan");
  td_status st = plan_make(s, k, p);
  if (st != TD_OK) {
    plan_free(p);
    td_error_push(__FILE__, __LINE__, __func__);
    return st;
  }
  p->key = *k;
  p->hash = h;
  p->next = *head;
  *head = p;
  s->nplans++;
  *out = p;
  return TD_OK;
}

/* Sizes cuBLASLt takes as 32-bit or 64-bit integers: refuse what it cannot. */
static td_status mm_check(const mm_key *k) {
  const int64_t lim = 2147483647LL;
  TD_REQUIRE(k->M >= 0 && k->N >= 0 && k->K >= 0, TD_ERR_USAGE,
             "gemm: sizes must be >= 0, got M=%lld N=%lld K=%lld", (long long)k->M,
             (long long)k->N, (long long)k->K);
  TD_REQUIRE(k->M <= lim && k->N <= lim && k->K <= lim && k->batch <= lim, TD_ERR_UNSUPPORTED,
             "gemm: M=%lld N=%lld K=%lld batch=%lld beyond cuBLASLt's 32-bit sizes",
             (long long)k->M, (long long)k->N, (long long)k->K, (long long)k->batch);
  return TD_OK;
}

/* Run the keyed product with pointers A, B, C (C is also D). */
static td_status mm_run(td_kernels *k, mm_key *key, float alpha, const void *A, const void *B,
                        void *C) {
  td_cuda_state *s = td_cuda_st(k);
  td_cuda_plan *p = NULL;
  float beta = key->beta_one ? 1.0f : 0.0f;
  key->align_a = mm_align(A, key->sA, key->batch, td_dtype_size((td_dtype)key->at));
  key->align_b = mm_align(B, key->sB, key->batch, td_dtype_size((td_dtype)key->bt));
  key->align_c = mm_align(C, key->sC, key->batch, td_dtype_size((td_dtype)key->ct));
  TD_CHECK(plan_get(s, key, &p));
  TD_CUBLAS_CHECK(cublasLtMatmul(s->lt, p->op, &alpha, B, p->la, A, p->lb, &beta, C, p->lc, C,
                                 p->lc, &p->algo, s->lt_ws, s->lt_ws_bytes, s->stream));
  return TD_OK;
}

/* Operand types without a cuBLASLt kernel: widen to float32 in the
 * workspace (A and B dense, C dense (M,N)), multiply, round C back. */
static td_status mm_widened(td_kernels *k, mm_key key, const void *A, const void *B,
                            void *C) {
  int64_t na = key.at == TD_DTYPE_BF16 ? key.M * key.K : 0;
  int64_t nb = key.bt == TD_DTYPE_BF16 ? key.K * key.N : 0;
  int64_t nc = key.ct == TD_DTYPE_BF16 ? key.M * key.N : 0;
  void *ws = NULL;
  TD_CHECK(td_cuda_scratch(k, (size_t)(na + nb + nc) * sizeof(float), &ws));
  float *wa = (float *)ws, *wb = wa + na, *wc = wb + nb;
  if (na) TD_CHECK(td_cuda_cast(k, wa, TD_DTYPE_F32, A, TD_DTYPE_BF16, na));
  if (nb) TD_CHECK(td_cuda_cast(k, wb, TD_DTYPE_F32, B, TD_DTYPE_BF16, nb));
  if (nc && key.beta_one) TD_CHECK(td_cuda_cast(k, wc, TD_DTYPE_F32, C, TD_DTYPE_BF16, nc));
  key.at = key.bt = key.ct = TD_DTYPE_F32;
  TD_CHECK(mm_run(k, &key, 1.0f, na ? wa : A, nb ? wb : B, nc ? wc : C));
  if (nc) TD_CHECK(td_cuda_cast(k, C, TD_DTYPE_BF16, wc, TD_DTYPE_F32, nc));
  return TD_OK;
}

/* C (M,N) = op(A)·op(B) + beta·C; A (M,K) or (K,M) when transA; B (K,N) or
 * (N,K) when transB; all dense row-major, of types at, bt, ct. */
td_status td_cuda_gemm(td_kernels *k, int transA, int transB, int64_t M, int64_t N,
                       int64_t K, const void *A, td_dtype at, const void *B, td_dtype bt,
                       float beta, void *C, td_dtype ct) {
  mm_key key;
  memset(&key, 0, sizeof key);
  key.M = M, key.N = N, key.K = K, key.batch = 1;
  key.transA = transA ? 1 : 0, key.transB = transB ? 1 : 0;
  key.lda = transA ? M : K;
  key.ldb = transB ? K : N;
  key.ldc = N;
  key.at = at, key.bt = bt, key.ct = ct;
  TD_CHECK(mm_check(&key));
  TD_REQUIRE(beta == 0.0f || beta == 1.0f, TD_ERR_USAGE, "gemm: beta must be 0 or 1, got %g",
             (double)beta);
  key.beta_one = beta == 1.0f;
  if (M == 0 || N == 0) return TD_OK;
  if (K == 0) { /* an empty sum */
    if (beta == 0.0f)
      TD_CUDA_CHECK(cudaMemsetAsync(C, 0, (size_t)(M * N) * td_dtype_size(ct),
                                    td_cuda_st(k)->stream));
    return TD_OK;
  }
  key.lda = key.lda > 0 ? key.lda : 1;
  key.ldb = key.ldb > 0 ? key.ldb : 1;
  if (at != bt || (at == TD_DTYPE_F32 && ct == TD_DTYPE_BF16))
    return mm_widened(k, key, A, B, C);
  TD_CHECK(mm_run(k, &key, 1.0f, A, B, C));
  return TD_OK;
}

/* C_i (M,N) = alpha·op(A_i)·op(B_i) + beta·C_i over i < batch, float32:
 * A_i = A + i·sA stored (M,K) (or (K,M) when transA) with row stride lda;
 * B_i = B + i·sB stored (K,N) (or (N,K)) with row stride ldb; C_i = C +
 * i·sC, (M,N), row stride ldc. */
td_status td_cuda_gemm_batched_f32(td_kernels *k, int transA, int transB, int64_t M,
                                   int64_t N, int64_t K, float alpha, const float *A,
                                   int64_t lda, int64_t sA, const float *B, int64_t ldb,
                                   int64_t sB, float beta, float *C, int64_t ldc, int64_t sC,
                                   int64_t batch) {
  mm_key key;
  memset(&key, 0, sizeof key);
  key.M = M, key.N = N, key.K = K, key.batch = batch;
  key.transA = transA ? 1 : 0, key.transB = transB ? 1 : 0;
  key.lda = lda, key.ldb = ldb, key.ldc = ldc;
  key.sA = sA, key.sB = sB, key.sC = sC;
  key.at = key.bt = key.ct = TD_DTYPE_F32;
  key.beta_one = beta == 1.0f;
  TD_CHECK(mm_check(&key));
  TD_REQUIRE(beta == 0.0f || beta == 1.0f, TD_ERR_USAGE,
             "batched gemm: beta must be 0 or 1, got %g", (double)beta);
  TD_REQUIRE(K > 0, TD_ERR_INTERNAL, "batched gemm: K must be > 0, got %lld", (long long)K);
  if (M == 0 || N == 0 || batch == 0) return TD_OK;
  TD_CHECK(mm_run(k, &key, alpha, A, B, C));
  return TD_OK;
}
