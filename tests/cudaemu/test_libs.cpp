/* test_libs.cpp — unit test of the emulated device's library stand-ins
 * (tests/cudaemu/src/cublaslt.cpp and nccl.cpp), through their public
 * headers and the public CUDA runtime API only.
 *
 *   test_cudaemu_libs blas       cuBLASLt against a float64 reference: every
 *                                transpose pair, row/column order, batches,
 *                                float32/bf16, odd sizes, alpha/beta, in
 *                                place, C broadcast; each documented refusal;
 *                                the speed of a training-sized product (printed).
 *   test_cudaemu_libs nccl N     NCCL between N forked processes (each its
 *                                own device): every collective (chunked),
 *                                groups of unequal parts, the in-place
 *                                rules, host pointers, operation mismatch,
 *                                the duplicate-GPU refusal, abort, the init
 *                                timeout.
 * Exit status 0 when every check passed. */
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <random>
#include <vector>

/* after the C++ library: the emulated runtime defines __noinline__ */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>

static int g_fail = 0, g_checks = 0, g_rank = -1;

static void check(bool ok, const char *fmt, ...) {
  g_checks++;
  if (ok) return;
  g_fail++;
  va_list ap;
  va_start(ap, fmt);
  if (g_rank >= 0) fprintf(stderr, "[rank %d] ", g_rank);
  fprintf(stderr, "FAIL: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

#define CU(x)                                                                         \
  do {                                                                                \
    cudaError_t e__ = (x);                                                            \
    if (e__ != cudaSuccess) {                                                         \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x,               \
              cudaGetErrorString(e__));                                               \
      exit(2);                                                                        \
    }                                                                                 \
  } while (0)

static double now_s() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint16_t bf16_of(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float f_of_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float v;
  memcpy(&v, &u, 4);
  return v;
}

/* A host image of device bytes. */
struct Buf {
  std::vector<unsigned char> h;
  void *d = nullptr;
  explicit Buf(size_t n) : h(n ? n : 1, 0) { CU(cudaMalloc(&d, h.size())); }
  ~Buf() { cudaFree(d); }
  void up() { CU(cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice)); }
  void down() { CU(cudaMemcpy(h.data(), d, h.size(), cudaMemcpyDeviceToHost)); }
  float getf(size_t i, bool bf) const {
    if (bf) {
      uint16_t v;
      memcpy(&v, &h[2 * i], 2);
      return f_of_bf16(v);
    }
    float v;
    memcpy(&v, &h[4 * i], 4);
    return v;
  }
  void setf(size_t i, float v, bool bf) {
    if (bf) {
      uint16_t b = bf16_of(v);
      memcpy(&h[2 * i], &b, 2);
    } else {
      memcpy(&h[4 * i], &v, 4);
    }
  }
};

/* ================================ cuBLASLt ================================= */

struct MatSpec {
  bool bf;     /* CUDA_R_16BF, else CUDA_R_32F */
  bool row;    /* CUBLASLT_ORDER_ROW */
  int64_t rows, cols, ld, stride;
};

static cublasLtMatrixLayout_t make_layout(const MatSpec &s, int batch) {
  cublasLtMatrixLayout_t l = nullptr;
  cublasLtMatrixLayoutCreate(&l, s.bf ? CUDA_R_16BF : CUDA_R_32F, (uint64_t)s.rows,
                             (uint64_t)s.cols, s.ld);
  int32_t ord = s.row ? CUBLASLT_ORDER_ROW : CUBLASLT_ORDER_COL;
  cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &ord, sizeof ord);
  if (batch > 1) {
    int32_t b = batch;
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b);
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s.stride,
                                     sizeof s.stride);
  }
  return l;
}

static size_t idx(const MatSpec &s, int64_t r, int64_t c, int b) {
  return (size_t)(b * s.stride + (s.row ? r * s.ld + c : c * s.ld + r));
}
static size_t elems(const MatSpec &s, int batch) {
  return (size_t)((batch - 1) * s.stride + (s.row ? s.rows * s.ld : s.cols * s.ld));
}

struct Case {
  int64_t m, n, k;
  int ta, tb, batch;
  bool abf, dbf, arow, brow, crow, inplace;
  float alpha, beta;
  int pad;          /* extra leading-dimension elements */
  bool c_broadcast; /* out of place with ldc 0 */
};

static cublasLtHandle_t g_lt;
static cudaStream_t g_stream;
static Buf *g_ws;
static const size_t kWs = 4u << 20;

/* Run one case; if `dout` is given, leave D's host image there. */
static void run_case(const Case &c, std::mt19937 &rng, std::vector<float> *dout = nullptr,
                     const std::vector<unsigned char> *ain = nullptr,
                     const std::vector<unsigned char> *bin = nullptr,
                     std::vector<unsigned char> *aout = nullptr,
                     std::vector<unsigned char> *bout = nullptr) {
  const int B = c.batch;
  MatSpec A{c.abf, c.arow, c.ta ? c.k : c.m, c.ta ? c.m : c.k, 0, 0};
  MatSpec Bm{c.abf, c.brow, c.tb ? c.n : c.k, c.tb ? c.k : c.n, 0, 0};
  MatSpec D{c.dbf, c.crow, c.m, c.n, 0, 0};
  A.ld = (A.row ? A.cols : A.rows) + c.pad;
  Bm.ld = (Bm.row ? Bm.cols : Bm.rows) + c.pad;
  D.ld = (D.row ? D.cols : D.rows) + c.pad;
  A.stride = (int64_t)elems(A, 1) + 5;
  Bm.stride = (int64_t)elems(Bm, 1) + 3;
  D.stride = (int64_t)elems(D, 1) + 7;
  MatSpec C = D;
  if (!c.inplace) {
    C.ld = c.c_broadcast ? 0 : D.ld + 2;
    C.stride = c.c_broadcast ? (int64_t)(D.row ? D.cols : D.rows) : (int64_t)elems(C, 1) + 1;
  }
  size_t es_ab = c.abf ? 2 : 4, es_d = c.dbf ? 2 : 4;
  Buf ba(elems(A, B) * es_ab), bb(elems(Bm, B) * es_ab), bd(elems(D, B) * es_d);
  Buf bc(c.inplace ? 4 : (elems(C, B) + (size_t)(C.row ? C.cols : C.rows)) * es_d);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  if (ain) ba.h = *ain; else for (size_t i = 0; i < ba.h.size() / es_ab; i++) ba.setf(i, u(rng), c.abf);
  if (bin) bb.h = *bin; else for (size_t i = 0; i < bb.h.size() / es_ab; i++) bb.setf(i, u(rng), c.abf);
  for (size_t i = 0; i < bd.h.size() / es_d; i++) bd.setf(i, u(rng), c.dbf);
  for (size_t i = 0; i < bc.h.size() / es_d; i++) bc.setf(i, u(rng), c.dbf);
  if (aout) *aout = ba.h;
  if (bout) *bout = bb.h;
  ba.up(), bb.up(), bd.up(), bc.up();
  std::vector<unsigned char> c_before = c.inplace ? bd.h : bc.h;

  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  int32_t ta = c.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = c.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  cublasLtMatrixLayout_t la = make_layout(A, B), lb = make_layout(Bm, B), ld = make_layout(D, B);
  cublasLtMatrixLayout_t lc = c.inplace ? ld : make_layout(C, B);
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulPreferenceCreate(&pref);
  uint64_t ws = kWs;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof ws);
  for (int a = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
       a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES; a++) {
    /* odd strides: element alignment only */
    uint32_t al = (uint32_t)(a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES ? es_ab : es_d);
    cublasLtMatmulPreferenceSetAttribute(pref, (cublasLtMatmulPreferenceAttributes_t)a, &al,
                                         sizeof al);
  }
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g_lt, op, la, lb, lc, ld, pref, 1, &res,
                                                     &found);
  check(st == CUBLAS_STATUS_SUCCESS && found == 1, "heuristic m%lld n%lld k%lld: %s",
        (long long)c.m, (long long)c.n, (long long)c.k, cublasLtGetStatusName(st));
  void *Cp = c.inplace ? bd.d : bc.d;
  st = cublasLtMatmul(g_lt, op, &c.alpha, ba.d, la, bb.d, lb, &c.beta, Cp, lc, bd.d, ld,
                      &res.algo, g_ws->d, kWs, g_stream);
  check(st == CUBLAS_STATUS_SUCCESS, "matmul: %s", cublasLtGetStatusName(st));
  CU(cudaStreamSynchronize(g_stream));
  bd.down();

  /* float64 reference over the exact (bf16-widened) inputs */
  double worst = 0;
  for (int b = 0; b < B; b++)
    for (int64_t i = 0; i < c.m; i++)
      for (int64_t j = 0; j < c.n; j++) {
        double s = 0, sa = 0;
        for (int64_t p = 0; p < c.k; p++) {
          double av = ba.getf(c.ta ? idx(A, p, i, b) : idx(A, i, p, b), c.abf);
          double bv = bb.getf(c.tb ? idx(Bm, j, p, b) : idx(Bm, p, j, b), c.abf);
          s += av * bv;
          sa += fabs(av * bv);
        }
        double cv = 0;
        if (c.beta != 0) {
          size_t ci = c.inplace ? idx(D, i, j, b) : idx(C, i, j, b);
          float f;
          if (c.dbf) {
            uint16_t h;
            memcpy(&h, &c_before[2 * ci], 2);
            f = f_of_bf16(h);
          } else {
            memcpy(&f, &c_before[4 * ci], 4);
          }
          cv = f;
        }
        double ref = c.alpha * s + c.beta * cv;
        double got = bd.getf(idx(D, i, j, b), c.dbf);
        double tol = 1e-6 * (double)(c.k + 2) * (fabs(c.alpha) * sa + fabs(c.beta * cv)) +
                     (c.dbf ? fabs(ref) * (1.0 / 256) : 0) + 1e-30;
        double err = fabs(got - ref);
        if (err > tol || got != got) worst = std::max(worst, err / tol + (got != got ? 1e9 : 0));
        if (dout) dout->push_back((float)got);
      }
  check(worst == 0,
        "m%lld n%lld k%lld ta%d tb%d batch%d %s->%s order A%s B%s CD%s %s pad%d alpha%g "
        "beta%g: error %g x tolerance",
        (long long)c.m, (long long)c.n, (long long)c.k, c.ta, c.tb, c.batch,
        c.abf ? "bf16" : "f32", c.dbf ? "bf16" : "f32", c.arow ? "row" : "col",
        c.brow ? "row" : "col", c.crow ? "row" : "col",
        c.inplace ? "in-place" : (c.c_broadcast ? "C-broadcast" : "out-of-place"), c.pad,
        (double)c.alpha, (double)c.beta, worst);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  if (!c.inplace) cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(op);
}

/* A small f32 problem's descriptors, for the refusal checks. */
struct Small {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  Small(cudaDataType at, cudaDataType bt, cudaDataType ct, int64_t m = 64, int64_t n = 64,
        int64_t k = 64, cublasComputeType_t comp = CUBLAS_COMPUTE_32F,
        cudaDataType scale = CUDA_R_32F) {
    cublasLtMatmulDescCreate(&op, comp, scale);
    cublasLtMatrixLayoutCreate(&la, at, (uint64_t)m, (uint64_t)k, m);
    cublasLtMatrixLayoutCreate(&lb, bt, (uint64_t)k, (uint64_t)n, k);
    cublasLtMatrixLayoutCreate(&lc, ct, (uint64_t)m, (uint64_t)n, m);
    cublasLtMatmulPreferenceCreate(&pref);
  }
  ~Small() {
    cublasLtMatmulDescDestroy(op);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulPreferenceDestroy(pref);
  }
  void set_align(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a, 4);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b, 4);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &c, 4);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &d, 4);
  }
  void set_ws(uint64_t w) {
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w, 8);
  }
  cublasStatus_t heur(cublasLtMatmulHeuristicResult_t *r, int *found) {
    return cublasLtMatmulAlgoGetHeuristic(g_lt, op, la, lb, lc, lc, pref, 1, r, found);
  }
};

static void test_refusals() {
  cublasLtMatmulHeuristicResult_t r;
  int found = -1;
  float one = 1, zero = 0;
  /* type table */
  {
    Small s(CUDA_R_32F, CUDA_R_16BF, CUDA_R_32F);
    cublasStatus_t st = s.heur(&r, &found);
    check(st == CUBLAS_STATUS_NOT_SUPPORTED && found == 0, "f32 x bf16: %s found %d",
          cublasLtGetStatusName(st), found);
  }
  {
    Small s(CUDA_R_32F, CUDA_R_32F, CUDA_R_16BF);
    cublasStatus_t st = s.heur(&r, &found);
    check(st == CUBLAS_STATUS_NOT_SUPPORTED && found == 0, "f32 -> bf16 C: %s",
          cublasLtGetStatusName(st));
  }
  {
    Small s(CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, 64, 64, 64, CUBLAS_COMPUTE_32F, CUDA_R_16F);
    cublasStatus_t st = s.heur(&r, &found);
    check(st == CUBLAS_STATUS_NOT_SUPPORTED, "scale 16F: %s", cublasLtGetStatusName(st));
  }
  {
    Small s(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF);
    cublasStatus_t st = s.heur(&r, &found);
    check(st == CUBLAS_STATUS_SUCCESS && found == 1, "bf16 -> bf16 is in the table: %s",
          cublasLtGetStatusName(st));
  }
  /* alignment promised below the element size: no algorithm */
  {
    Small s(CUDA_R_32F, CUDA_R_32F, CUDA_R_32F);
    s.set_align(2, 256, 256, 256);
    cublasStatus_t st = s.heur(&r, &found);
    check(st == CUBLAS_STATUS_NOT_SUPPORTED && found == 0, "align 2 for f32 A: %s",
          cublasLtGetStatusName(st));
  }
  /* pointers less aligned than promised; workspace too small; NULL, host
   * and out-of-bounds pointers; in-place with a different ldc */
  {
    Small s(CUDA_R_32F, CUDA_R_32F, CUDA_R_32F);
    s.set_align(16, 16, 16, 16);
    s.set_ws(1u << 20);
    cublasStatus_t st = s.heur(&r, &found);
    check(st == CUBLAS_STATUS_SUCCESS && found == 1 && r.workspaceSize > 0,
          "16-byte heuristic: %s ws %zu", cublasLtGetStatusName(st), r.workspaceSize);
    Buf a(64 * 64 * 4 + 16), b(64 * 64 * 4), c(64 * 64 * 4), w(1u << 20);
    a.up(), b.up(), c.up();
    st = cublasLtMatmul(g_lt, s.op, &one, (char *)a.d + 4, s.la, b.d, s.lb, &zero, c.d, s.lc,
                        c.d, s.lc, &r.algo, w.d, 1u << 20, g_stream);
    check(st == CUBLAS_STATUS_INVALID_VALUE, "A 4 bytes off a 16-byte promise: %s",
          cublasLtGetStatusName(st));
    st = cublasLtMatmul(g_lt, s.op, &one, a.d, s.la, b.d, s.lb, &zero, c.d, s.lc, c.d, s.lc,
                        &r.algo, w.d, r.workspaceSize - 1, g_stream);
    check(st == CUBLAS_STATUS_INVALID_VALUE, "workspace short by one byte: %s",
          cublasLtGetStatusName(st));
    st = cublasLtMatmul(g_lt, s.op, &one, nullptr, s.la, b.d, s.lb, &zero, c.d, s.lc, c.d,
                        s.lc, &r.algo, w.d, 1u << 20, g_stream);
    check(st == CUBLAS_STATUS_INVALID_VALUE, "A NULL: %s", cublasLtGetStatusName(st));
    std::vector<float> host(64 * 64 + 4);
    float *hp = (float *)(((uintptr_t)host.data() + 15) & ~(uintptr_t)15);
    st = cublasLtMatmul(g_lt, s.op, &one, hp, s.la, b.d, s.lb, &zero, c.d, s.lc, c.d, s.lc,
                        &r.algo, w.d, 1u << 20, g_stream);
    check(st == CUBLAS_STATUS_INVALID_VALUE, "A in host memory: %s", cublasLtGetStatusName(st));
    st = cublasLtMatmul(g_lt, s.op, &one, a.d, s.la, (char *)b.d + 16, s.lb, &zero, c.d, s.lc,
                        c.d, s.lc, &r.algo, w.d, 1u << 20, g_stream);
    check(st == CUBLAS_STATUS_INVALID_VALUE, "B past its allocation: %s",
          cublasLtGetStatusName(st));
    cublasLtMatrixLayout_t lc2 = nullptr;
    cublasLtMatrixLayoutCreate(&lc2, CUDA_R_32F, 64, 64, 64);
    int64_t ld2 = 64;
    cublasLtMatrixLayoutSetAttribute(lc2, CUBLASLT_MATRIX_LAYOUT_LD, &ld2, sizeof ld2);
    Buf big(80 * 64 * 4);
    cublasLtMatrixLayout_t ld80 = nullptr;
    cublasLtMatrixLayoutCreate(&ld80, CUDA_R_32F, 64, 64, 80);
    st = cublasLtMatmul(g_lt, s.op, &one, a.d, s.la, b.d, s.lb, &one, big.d, lc2, big.d, ld80,
                        &r.algo, w.d, 1u << 20, g_stream);
    check(st == CUBLAS_STATUS_INVALID_VALUE, "in place with ldc 64, ldd 80: %s",
          cublasLtGetStatusName(st));
    cublasLtMatrixLayoutDestroy(lc2);
    cublasLtMatrixLayoutDestroy(ld80);
    /* the good call, and its workspace scribbled on */
    CU(cudaMemset(w.d, 0, 1u << 20));
    st = cublasLtMatmul(g_lt, s.op, &one, a.d, s.la, b.d, s.lb, &zero, c.d, s.lc, c.d, s.lc,
                        &r.algo, w.d, 1u << 20, g_stream);
    check(st == CUBLAS_STATUS_SUCCESS, "aligned call: %s", cublasLtGetStatusName(st));
    CU(cudaStreamSynchronize(g_stream));
    w.down();
    check(w.h[0] == 0xff && w.h[r.workspaceSize - 1] == 0xff && w.h[r.workspaceSize] == 0,
          "the algorithm's workspace was used, and only it");
    st = cublasLtMatmul(nullptr, s.op, &one, a.d, s.la, b.d, s.lb, &zero, c.d, s.lc, c.d, s.lc,
                        &r.algo, w.d, 1u << 20, g_stream);
    check(st == CUBLAS_STATUS_NOT_INITIALIZED, "NULL handle: %s", cublasLtGetStatusName(st));
    st = cublasLtMatmulAlgoGetHeuristic(g_lt, s.op, s.la, s.lb, s.lc, s.lc, s.pref, 0, &r,
                                        &found);
    check(st == CUBLAS_STATUS_INVALID_VALUE, "requestedAlgoCount 0: %s",
          cublasLtGetStatusName(st));
  }
  /* leading dimensions */
  {
    Small s(CUDA_R_32F, CUDA_R_32F, CUDA_R_32F);
    int64_t bad = 63;
    cublasLtMatrixLayoutSetAttribute(s.la, CUBLASLT_MATRIX_LAYOUT_LD, &bad, sizeof bad);
    cublasStatus_t st = s.heur(&r, &found);
    check(st == CUBLAS_STATUS_INVALID_VALUE, "col-major lda 63 < 64 rows: %s",
          cublasLtGetStatusName(st));
    int64_t good = 64;
    cublasLtMatrixLayoutSetAttribute(s.la, CUBLASLT_MATRIX_LAYOUT_LD, &good, sizeof good);
    cublasLtMatrixLayout_t lr = nullptr;
    cublasLtMatrixLayoutCreate(&lr, CUDA_R_32F, 64, 64, 50);
    int32_t row = CUBLASLT_ORDER_ROW;
    cublasLtMatrixLayoutSetAttribute(lr, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof row);
    st = cublasLtMatmulAlgoGetHeuristic(g_lt, s.op, lr, s.lb, s.lc, s.lc, s.pref, 1, &r, &found);
    check(st == CUBLAS_STATUS_INVALID_VALUE, "row-major ld 50 < 64 cols: %s",
          cublasLtGetStatusName(st));
    /* C and D of different orders */
    int64_t ld64 = 64;
    cublasLtMatrixLayoutSetAttribute(lr, CUBLASLT_MATRIX_LAYOUT_LD, &ld64, sizeof ld64);
    st = cublasLtMatmulAlgoGetHeuristic(g_lt, s.op, s.la, s.lb, lr, s.lc, s.pref, 1, &r, &found);
    check(st == CUBLAS_STATUS_INVALID_VALUE, "C row-major, D column-major: %s",
          cublasLtGetStatusName(st));
    cublasLtMatrixLayoutDestroy(lr);
    int32_t col32 = CUBLASLT_ORDER_COL32;
    cublasLtMatrixLayoutSetAttribute(s.lb, CUBLASLT_MATRIX_LAYOUT_ORDER, &col32, sizeof col32);
    st = s.heur(&r, &found);
    check(st == CUBLAS_STATUS_NOT_SUPPORTED, "COL32 order: %s", cublasLtGetStatusName(st));
  }
  /* shapes that do not chain; attribute sizes */
  {
    Small s(CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, 64, 64, 64);
    int32_t t = CUBLAS_OP_T;
    uint64_t rows = 32;
    cublasLtMatrixLayoutSetAttribute(s.lb, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof rows);
    cublasStatus_t st = s.heur(&r, &found);
    check(st == CUBLAS_STATUS_INVALID_VALUE, "k mismatch: %s", cublasLtGetStatusName(st));
    st = cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSA, &t, 8);
    check(st == CUBLAS_STATUS_INVALID_VALUE, "attribute of wrong size: %s",
          cublasLtGetStatusName(st));
    size_t need = 0;
    st = cublasLtMatmulDescGetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 0, &need);
    check(st == CUBLAS_STATUS_SUCCESS && need == 4, "size query: %s %zu",
          cublasLtGetStatusName(st), need);
  }
}

static int test_blas() {
  CU(cudaSetDevice(0));
  CU(cudaStreamCreate(&g_stream));
  check(cublasLtCreate(&g_lt) == CUBLAS_STATUS_SUCCESS, "cublasLtCreate");
  g_ws = new Buf(kWs);
  std::mt19937 rng(1234);
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {70, 300, 129}};
  int ncase = 0;
  for (auto &sh : shapes)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int order = 0; order < 3; order++)
          for (int types = 0; types < 3; types++) {
            Case c{};
            c.m = sh[0], c.n = sh[1], c.k = sh[2];
            c.ta = ta, c.tb = tb, c.batch = 1;
            c.abf = types > 0, c.dbf = types == 2;
            c.arow = order == 1, c.brow = order != 0, c.crow = order == 1; /* 2: mixed */
            c.inplace = true, c.alpha = 1, c.beta = 0, c.pad = 0;
            run_case(c, rng);
            ncase++;
            if (sh[0] == 33) { /* the variations on one mid-sized shape */
              Case v = c;
              v.batch = 3, v.pad = 3, v.alpha = 0.5f, v.beta = 1.0f;
              run_case(v, rng);
              v.inplace = false, v.beta = -2.0f, v.batch = 2;
              run_case(v, rng);
              v.c_broadcast = true;
              run_case(v, rng);
              ncase += 3;
            }
          }
  /* bf16 D is the float result rounded once to nearest even: the same
   * inputs through a float32 D, then rounded here, give the same bits */
  {
    Case c{};
    c.m = 37, c.n = 29, c.k = 300, c.ta = 1, c.tb = 0, c.batch = 1, c.abf = true;
    c.dbf = false, c.inplace = true, c.alpha = 1, c.beta = 0;
    std::vector<float> f32, b16;
    std::vector<unsigned char> a, b;
    run_case(c, rng, &f32, nullptr, nullptr, &a, &b);
    c.dbf = true;
    run_case(c, rng, &b16, &a, &b);
    size_t bad = 0;
    for (size_t i = 0; i < f32.size(); i++)
      if (f_of_bf16(bf16_of(f32[i])) != b16[i]) bad++;
    check(bad == 0 && f32.size() == (size_t)(37 * 29), "bf16 D rounding: %zu of %zu differ", bad,
          f32.size());
  }
  test_refusals();

  /* speed: the (512 x 128)·(128 x 384) product of a training step */
  {
    const int64_t M = 512, N = 384, K = 128;
    Small s(CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, M, N, K);
    s.set_align(16, 16, 16, 16);
    s.set_ws(kWs);
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    s.heur(&r, &found);
    Buf a((size_t)(M * K * 4)), b((size_t)(K * N * 4)), c((size_t)(M * N * 4));
    for (size_t i = 0; i < (size_t)(M * K); i++) a.setf(i, 0.001f * (float)(i % 97), false);
    for (size_t i = 0; i < (size_t)(K * N); i++) b.setf(i, 0.002f * (float)(i % 89), false);
    a.up(), b.up();
    float one = 1, zero = 0;
    const int reps = 20;
    cublasLtMatmul(g_lt, s.op, &one, a.d, s.la, b.d, s.lb, &zero, c.d, s.lc, c.d, s.lc, &r.algo,
                   g_ws->d, kWs, g_stream);
    CU(cudaStreamSynchronize(g_stream));
    double t0 = now_s();
    for (int i = 0; i < reps; i++)
      cublasLtMatmul(g_lt, s.op, &one, a.d, s.la, b.d, s.lb, &zero, c.d, s.lc, c.d, s.lc,
                     &r.algo, g_ws->d, kWs, g_stream);
    CU(cudaStreamSynchronize(g_stream));
    double dt = now_s() - t0, gf = 2.0 * M * N * K * reps / dt * 1e-9;
    printf("cublasLt emulation: (%lld x %lld)·(%lld x %lld) f32 at %.2f GFLOP/s\n",
           (long long)M, (long long)K, (long long)K, (long long)N, gf);
    /* printed, not asserted: a test checks correctness, a timer on a shared
     * machine (or under a sanitizer) would fail by chance */
  }
  delete g_ws;
  cublasLtDestroy(g_lt);
  CU(cudaStreamDestroy(g_stream));
  printf("blas: %d cases, %d checks, %d failed\n", ncase, g_checks, g_fail);
  return g_fail ? 1 : 0;
}

/* ================================== NCCL =================================== */

/* rank r's value i: exact in bf16 as well (small integers / 8) */
static float val(int r, size_t i) { return (float)((int)((i * 7 + (size_t)r * 13) % 61) - 30) / 8.0f; }

static ncclResult_t sync_err(ncclComm_t comm, cudaStream_t s) {
  CU(cudaStreamSynchronize(s));
  ncclResult_t a = ncclSuccess;
  ncclCommGetAsyncError(comm, &a);
  return a;
}

/* expected reduce of val over ranks, in rank order, in float */
static float expect_red(int n, size_t i, int op, bool bf) {
  float acc = val(0, i);
  for (int q = 1; q < n; q++) {
    float v = val(q, i);
    if (bf) v = f_of_bf16(bf16_of(v));
    acc = op == ncclMax ? std::max(acc, v) : acc + v;
  }
  return bf ? f_of_bf16(bf16_of(acc)) : acc;
}

static int nccl_child(int rank, int n, const ncclUniqueId *ids) {
  g_rank = rank;
  alarm(240);
  CU(cudaSetDevice(rank));
  cudaStream_t s;
  CU(cudaStreamCreate(&s));
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRank(&comm, n, ids[0], rank);
  check(r == ncclSuccess, "init: %s (%s)", ncclGetErrorString(r), ncclGetLastError(nullptr));
  if (r != ncclSuccess) return 1;
  int cnt = 0, dev = -1, me = -1;
  ncclCommCount(comm, &cnt), ncclCommCuDevice(comm, &dev), ncclCommUserRank(comm, &me);
  check(cnt == n && dev == rank && me == rank, "count %d device %d rank %d", cnt, dev, me);

  const size_t N = 5000; /* > TD_CUDAEMU_NCCL_CHUNK_BYTES: several chunks */
  /* all-reduce: sum float out of place, max float in place, sum/max bf16 */
  for (int bf = 0; bf < 2; bf++)
    for (int op = 0; op < 2; op++) {
      size_t es = bf ? 2 : 4;
      Buf send(N * es), recv(N * es);
      for (size_t i = 0; i < N; i++) send.setf(i, val(rank, i), bf);
      send.up();
      ncclRedOp_t red = op ? ncclMax : ncclSum;
      bool inplace = op == 1;
      r = ncclAllReduce(send.d, inplace ? send.d : recv.d, N, bf ? ncclBfloat16 : ncclFloat32,
                        red, comm, s);
      check(r == ncclSuccess && sync_err(comm, s) == ncclSuccess, "allreduce bf%d op%d: %s", bf,
            op, ncclGetErrorString(r));
      Buf &out = inplace ? send : recv;
      out.down();
      size_t bad = 0;
      for (size_t i = 0; i < N; i++)
        if (out.getf(i, bf) != expect_red(n, i, red, bf)) bad++;
      check(bad == 0, "allreduce bf%d op%d: %zu wrong", bf, op, bad);
    }
  /* reduce-scatter and all-gather, out of place and in place */
  for (int inplace = 0; inplace < 2; inplace++) {
    const size_t rc = 1531;
    Buf send(rc * (size_t)n * 4), recv(rc * 4);
    for (size_t i = 0; i < rc * (size_t)n; i++) send.setf(i, val(rank, i), false);
    send.up();
    void *rp = inplace ? (char *)send.d + (size_t)rank * rc * 4 : recv.d;
    r = ncclReduceScatter(send.d, rp, rc, ncclFloat32, ncclSum, comm, s);
    check(r == ncclSuccess && sync_err(comm, s) == ncclSuccess, "reducescatter in%d: %s",
          inplace, ncclGetErrorString(r));
    Buf &out = inplace ? send : recv;
    out.down();
    size_t bad = 0, base = inplace ? (size_t)rank * rc : 0;
    for (size_t i = 0; i < rc; i++)
      if (out.getf(base + i, false) != expect_red(n, (size_t)rank * rc + i, ncclSum, false)) bad++;
    check(bad == 0, "reducescatter in%d: %zu wrong", inplace, bad);

    Buf gs(rc * 2), gr(rc * (size_t)n * 2);
    for (size_t i = 0; i < rc; i++) gs.setf(i, val(rank, i), true);
    for (size_t i = 0; i < rc; i++) gr.setf((size_t)rank * rc + i, val(rank, i), true);
    gs.up(), gr.up();
    const void *sp = inplace ? (char *)gr.d + (size_t)rank * rc * 2 : gs.d;
    r = ncclAllGather(sp, gr.d, rc, ncclBfloat16, comm, s);
    check(r == ncclSuccess && sync_err(comm, s) == ncclSuccess, "allgather in%d: %s", inplace,
          ncclGetErrorString(r));
    gr.down();
    bad = 0;
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < rc; i++)
        if (gr.getf((size_t)q * rc + i, true) != f_of_bf16(bf16_of(val(q, i)))) bad++;
    check(bad == 0, "allgather in%d: %zu wrong", inplace, bad);
  }
  /* reduce to and broadcast from every root */
  for (int root = 0; root < n; root++) {
    Buf send(N * 4), recv(N * 4);
    for (size_t i = 0; i < N; i++) send.setf(i, val(rank, i), false);
    send.up(), recv.up();
    r = ncclReduce(send.d, recv.d, N, ncclFloat32, ncclSum, root, comm, s);
    check(r == ncclSuccess && sync_err(comm, s) == ncclSuccess, "reduce root %d", root);
    recv.down();
    size_t bad = 0;
    for (size_t i = 0; i < N && rank == root; i++)
      if (recv.getf(i, false) != expect_red(n, i, ncclSum, false)) bad++;
    check(bad == 0, "reduce root %d: %zu wrong", root, bad);
    r = ncclBroadcast(send.d, recv.d, N, ncclFloat32, root, comm, s);
    check(r == ncclSuccess && sync_err(comm, s) == ncclSuccess, "broadcast root %d", root);
    recv.down();
    bad = 0;
    for (size_t i = 0; i < N; i++)
      if (recv.getf(i, false) != val(root, i)) bad++;
    check(bad == 0, "broadcast root %d: %zu wrong", root, bad);
  }
  /* groups of unequal parts: reduce-scatterv as one ncclReduce per part,
   * all-gatherv (in place) as one ncclBroadcast per part, as nccl.cu does */
  {
    std::vector<int> counts((size_t)n), displs((size_t)n);
    int tot = 0;
    for (int q = 0; q < n; q++) counts[(size_t)q] = q == 1 ? 0 : 700 + 311 * q, displs[(size_t)q] = tot, tot += counts[(size_t)q];
    Buf send((size_t)tot * 4), recv((size_t)std::max(counts[(size_t)rank], 1) * 4);
    for (int i = 0; i < tot; i++) send.setf((size_t)i, val(rank, (size_t)i), false);
    send.up();
    check(ncclGroupStart() == ncclSuccess, "group start");
    for (int q = 0; q < n; q++)
      if (counts[(size_t)q])
        r = ncclReduce((float *)send.d + displs[(size_t)q], recv.d, (size_t)counts[(size_t)q],
                       ncclFloat32, ncclSum, q, comm, s);
    r = ncclGroupEnd();
    check(r == ncclSuccess && sync_err(comm, s) == ncclSuccess, "reduce-scatterv group: %s",
          ncclGetErrorString(r));
    recv.down();
    size_t bad = 0;
    for (int i = 0; i < counts[(size_t)rank]; i++)
      if (recv.getf((size_t)i, false) !=
          expect_red(n, (size_t)(displs[(size_t)rank] + i), ncclSum, false))
        bad++;
    check(bad == 0, "reduce-scatterv: %zu wrong", bad);

    Buf all((size_t)tot * 2);
    for (int i = 0; i < counts[(size_t)rank]; i++)
      all.setf((size_t)(displs[(size_t)rank] + i), val(rank, (size_t)i), true);
    all.up();
    const char *mine = (const char *)all.d + (size_t)displs[(size_t)rank] * 2;
    ncclGroupStart();
    for (int q = 0; q < n; q++)
      if (counts[(size_t)q])
        ncclBroadcast(mine, (char *)all.d + (size_t)displs[(size_t)q] * 2,
                      (size_t)counts[(size_t)q], ncclBfloat16, q, comm, s);
    r = ncclGroupEnd();
    check(r == ncclSuccess && sync_err(comm, s) == ncclSuccess, "all-gatherv group: %s",
          ncclGetErrorString(r));
    all.down();
    bad = 0;
    for (int q = 0; q < n; q++)
      for (int i = 0; i < counts[(size_t)q]; i++)
        if (all.getf((size_t)(displs[(size_t)q] + i), true) != f_of_bf16(bf16_of(val(q, (size_t)i))))
          bad++;
    check(bad == 0, "all-gatherv: %zu wrong", bad);
  }
  /* refusals at the call: the in-place rules, host memory, a bad root, an
   * error inside a group (the group issues nothing) */
  {
    const size_t rc = 64;
    Buf b(rc * (size_t)(n + 1) * 4);
    char *base = (char *)b.d;
    r = ncclReduceScatter(base, base + (size_t)rank * rc * 4 + 4, rc, ncclFloat32, ncclSum, comm, s);
    check(r == ncclInvalidArgument && strstr(ncclGetLastError(comm), "In-place"),
          "reduce-scatter, recvbuff one element off: %s / %s", ncclGetErrorString(r),
          ncclGetLastError(comm));
    r = ncclAllGather(base + (size_t)rank * rc * 4 + 4, base, rc, ncclFloat32, comm, s);
    check(r == ncclInvalidArgument, "all-gather, sendbuff one element off: %s",
          ncclGetErrorString(r));
    if (n > 1) {
      r = ncclAllGather(base + (size_t)((rank + 1) % n) * rc * 4, base, rc, ncclFloat32, comm, s);
      check(r == ncclInvalidArgument, "all-gather, sendbuff another rank's part: %s",
            ncclGetErrorString(r));
    }
    r = ncclAllReduce(base, base + 8, rc, ncclFloat32, ncclSum, comm, s);
    check(r == ncclInvalidArgument, "all-reduce, buffers overlapping: %s", ncclGetErrorString(r));
    std::vector<float> host(rc);
    r = ncclAllReduce(host.data(), b.d, rc, ncclFloat32, ncclSum, comm, s);
    check(r == ncclInvalidArgument && strstr(ncclGetLastError(comm), "not a valid device pointer"),
          "host sendbuff: %s / %s", ncclGetErrorString(r), ncclGetLastError(comm));
    r = ncclBroadcast(b.d, b.d, rc, ncclFloat32, n, comm, s);
    check(r == ncclInvalidArgument, "root out of range: %s", ncclGetErrorString(r));
    ncclGroupStart();
    ncclAllReduce(b.d, b.d, rc, ncclFloat32, ncclSum, comm, s);
    ncclAllReduce(host.data(), b.d, rc, ncclFloat32, ncclSum, comm, s);
    r = ncclGroupEnd();
    check(r == ncclInvalidArgument, "group with a bad call: %s", ncclGetErrorString(r));
    check(sync_err(comm, s) == ncclSuccess, "the failed group issued nothing");
    /* and the communicator still works, on every rank alike */
    Buf one(4);
    one.setf(0, 1.0f, false);
    one.up();
    r = ncclAllReduce(one.d, one.d, 1, ncclFloat32, ncclSum, comm, s);
    check(r == ncclSuccess && sync_err(comm, s) == ncclSuccess, "allreduce after refusals");
    one.down();
    check(one.getf(0, false) == (float)n, "allreduce of ones: %g", (double)one.getf(0, false));
  }
  /* point-to-point: a ring in one group (each rank sends to the next and
   * receives from the one before: without the group a rendezvous send would
   * wait forever), several chunks, f32 and bf16; one way, two messages in a
   * row; a send completes only once its receive has run */
  {
    const size_t N2 = 3000; /* 12 KB: three 4 KiB chunks */
    for (int bf = 0; bf < 2; bf++) {
      Buf send(N2 * 4), recv(N2 * 4);
      for (size_t i = 0; i < N2; i++) send.setf(i, val(rank, i), bf);
      send.up();
      ncclDataType_t t = bf ? ncclBfloat16 : ncclFloat32;
      check(ncclGroupStart() == ncclSuccess, "group start (ring)");
      ncclSend(send.d, N2, t, (rank + 1) % n, comm, s);
      ncclRecv(recv.d, N2, t, (rank + n - 1) % n, comm, s);
      r = ncclGroupEnd();
      check(r == ncclSuccess && sync_err(comm, s) == ncclSuccess, "ring bf%d: %s", bf,
            ncclGetErrorString(r));
      recv.down();
      size_t bad = 0;
      for (size_t i = 0; i < N2; i++)
        if (recv.getf(i, bf) != f_of_bf16(bf16_of(val((rank + n - 1) % n, i))) && bf) bad++;
        else if (!bf && recv.getf(i, false) != val((rank + n - 1) % n, i)) bad++;
      check(bad == 0, "ring bf%d: %zu wrong", bf, bad);
    }
    if (n > 1 && rank < 2) {
      Buf a(N2 * 4), b(N2 * 4);
      if (rank == 0) {
        for (size_t i = 0; i < N2; i++) a.setf(i, val(7, i), false), b.setf(i, val(8, i), false);
        a.up(), b.up();
        double t0 = now_s();
        r = ncclSend(a.d, N2, ncclFloat32, 1, comm, s);
        ncclResult_t r2 = ncclSend(b.d, N2 / 2, ncclFloat32, 1, comm, s);
        check(r == ncclSuccess && r2 == ncclSuccess && sync_err(comm, s) == ncclSuccess,
              "two sends in a row");
        check(now_s() - t0 > 0.25, "a send waited for its receive (%.3f s)", now_s() - t0);
      } else {
        usleep(400000); /* the sends must wait for these */
        r = ncclRecv(a.d, N2, ncclFloat32, 0, comm, s);
        ncclResult_t r2 = ncclRecv(b.d, N2 / 2, ncclFloat32, 0, comm, s);
        check(r == ncclSuccess && r2 == ncclSuccess && sync_err(comm, s) == ncclSuccess,
              "two receives in a row");
        a.down(), b.down();
        size_t bad = 0;
        for (size_t i = 0; i < N2; i++) bad += a.getf(i, false) != val(7, i);
        for (size_t i = 0; i < N2 / 2; i++) bad += b.getf(i, false) != val(8, i);
        check(bad == 0, "one way, two messages: %zu wrong", bad);
      }
    }
    r = ncclSend(nullptr, 4, ncclFloat32, n, comm, s);
    check(r == ncclInvalidArgument, "send to a peer out of range: %s", ncclGetErrorString(r));
  }
  /* ranks that disagree (different counts): an error on every rank */
  if (n > 1) {
    Buf b(64 * 4);
    r = ncclAllReduce(b.d, b.d, rank == 0 ? 16 : 32, ncclFloat32, ncclSum, comm, s);
    ncclResult_t a = sync_err(comm, s);
    check(r == ncclSuccess && a != ncclSuccess, "count mismatch: async %s",
          ncclGetErrorString(a));
  }
  check(ncclCommDestroy(comm) == ncclSuccess, "destroy");

  /* two ranks on one device: every rank's init fails alike */
  if (n > 1) {
    CU(cudaSetDevice(rank == 1 ? 0 : rank));
    ncclComm_t dup = nullptr;
    r = ncclCommInitRank(&dup, n, ids[1], rank);
    check(r == ncclInvalidUsage && dup == nullptr &&
              strstr(ncclGetLastError(nullptr),
                     "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 0"),
          "duplicate GPU: %s / %s", ncclGetErrorString(r), ncclGetLastError(nullptr));
    CU(cudaSetDevice(rank));
  }
  /* abort: the last rank aborts while the others wait on it in a
   * collective; they see an error instead of hanging */
  if (n > 1) {
    ncclComm_t ab = nullptr;
    r = ncclCommInitRank(&ab, n, ids[2], rank);
    check(r == ncclSuccess, "init (abort test): %s", ncclGetErrorString(r));
    Buf b(1024 * 4);
    double t0 = now_s();
    if (rank == n - 1) {
      usleep(200000);
      check(ncclCommAbort(ab) == ncclSuccess, "abort");
    } else {
      r = ncclAllReduce(b.d, b.d, 1024, ncclFloat32, ncclSum, ab, s);
      ncclResult_t a = sync_err(ab, s);
      check(r == ncclSuccess && a == ncclRemoteError && now_s() - t0 < 30,
            "peer of an aborted rank: async %s after %.1f s (%s)", ncclGetErrorString(a),
            now_s() - t0, ncclGetLastError(ab));
      ncclCommAbort(ab);
    }
  }
  /* an init that never completes (one rank more than exist) times out */
  {
    setenv("TD_CUDAEMU_NCCL_TIMEOUT_S", "1", 1);
    ncclComm_t to = nullptr;
    double t0 = now_s();
    r = ncclCommInitRank(&to, n + 1, ids[3], rank);
    check(r != ncclSuccess && to == nullptr && now_s() - t0 < 20,
          "init of a missing rank: %s after %.1f s", ncclGetErrorString(r), now_s() - t0);
  }
  CU(cudaStreamDestroy(s));
  printf("nccl rank %d of %d: %d checks, %d failed\n", rank, n, g_checks, g_fail);
  return g_fail ? 1 : 0;
}

static int test_nccl(int n) {
  ncclUniqueId ids[4];
  for (auto &id : ids)
    if (ncclGetUniqueId(&id) != ncclSuccess) return 2;
  char nd[16];
  snprintf(nd, sizeof nd, "%d", n);
  setenv("TD_CUDAEMU_DEVICES", nd, 1);
  setenv("TD_CUDAEMU_NCCL_CHUNK_BYTES", "4096", 1);
  std::vector<pid_t> kids;
  for (int r = 0; r < n; r++) {
    pid_t p = fork();
    if (p == 0) {
      fflush(stdout);
      _exit(nccl_child(r, n, ids));
    }
    kids.push_back(p);
  }
  int bad = 0;
  for (pid_t p : kids) {
    int st = 0;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "child %d: %s %d\n", (int)p, WIFEXITED(st) ? "exit" : "signal",
              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
      bad++;
    }
  }
  printf("nccl at %d ranks: %s\n", n, bad ? "FAILED" : "passed");
  return bad ? 1 : 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc >= 2 && strcmp(argv[1], "blas") == 0) return test_blas();
  if (argc >= 3 && strcmp(argv[1], "nccl") == 0) return test_nccl(atoi(argv[2]));
  fprintf(stderr, "usage: %s blas | nccl NRANKS\n", argv[0]);
  return 2;
}
