/* cublaslt.cpp — the emulated device's cuBLASLt (include/cublasLt.h): the
 * descriptors, the algorithm heuristic and cublasLtMatmul, computed on the
 * CPU. Test code only (tests/cudaemu), never part of a real build.
 *
 * Semantics follow NVIDIA's cuBLAS documentation ("cuBLASLt API"), section
 * by section; every refusal below names the section it comes from:
 *   D = alpha·op(A)·op(B) + beta·C (+ bias), matrices column-major unless a
 *   layout says CUBLASLT_ORDER_ROW, leading dimensions and strided batches
 *   read from the layouts, op() from the descriptor's TRANSA / TRANSB.
 * Arithmetic (CUBLAS_COMPUTE_32F / _PEDANTIC with CUDA_R_32F scale): bf16
 * operands widen exactly to float, products accumulate in float in
 * increasing k order, alpha and beta apply in float, a bf16 D rounds once to
 * nearest even. Results are therefore deterministic (but need not match a
 * GPU's summation order bit for bit).
 *
 * The matmul is asynchronous as on a GPU: cublasLtMatmul validates on the
 * calling thread (touching no device memory: pointers are only located with
 * cudaemu::where), reads host-mode alpha and beta, then queues the product
 * on the stream with cudaemu::enqueue.
 *
 * What the emulation models of the heuristic (documented behaviour, with an
 * emulation-specific algorithm): the algorithm returned for a problem
 * requires, for each of A, B, C, D, the alignment the preference promised
 * (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES), capped at 16 bytes (one
 * vector load) and at what the leading dimension and batch stride allow; a
 * promise below the element size leaves no algorithm. When the preference
 * allows workspace, the algorithm uses a split-K style buffer of
 * min(max workspace, 1 MiB, 4·m·n·batch) bytes, which the emulated kernel
 * fills with NaN bytes, so a caller that shares the workspace with live
 * data sees it. Refusals print one line naming the rule on stderr. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <new>
#include <vector>

#include <cublasLt.h> /* after the C++ library: the emulated runtime defines __noinline__ */

#include "emu_internal.h"

namespace {

const uint32_t kHandleMagic = 0x4c74486eu; /* "LtHn" */
const uint32_t kLayoutMagic = 0x4c744c79u;
const uint32_t kDescMagic = 0x4c744473u;
const uint32_t kPrefMagic = 0x4c745066u;
const uint32_t kAlgoMagic = 0x4c74416cu;
const uint64_t kSplitKBytes = 1u << 20; /* the emulated algorithm's largest workspace */
const uint32_t kVectorBytes = 16;       /* the widest alignment an algorithm relies on */

struct Handle {
  uint32_t magic;
  int device; /* current device at cublasLtCreate */
};

struct Layout {
  uint32_t magic;
  int32_t type; /* cudaDataType */
  int32_t order;
  int32_t batch;
  uint64_t rows, cols;
  int64_t ld, stride, plane;
  uint32_t batch_mode;
};

struct Desc {
  uint32_t magic;
  int32_t compute, scale, pointer_mode, transa, transb, transc, fill;
  uint32_t epilogue;
  const void *bias;
  int64_t bias_stride;
  int32_t bias_type;
};

struct Pref {
  uint32_t magic;
  uint32_t search;
  uint64_t max_ws;
  uint32_t reduction_mask;
  uint32_t align[4]; /* A, B, C, D */
  float max_waves;
  uint64_t impl_mask;
};

/* What cublasLtMatmulAlgo_t holds here: the problem class it was chosen for
 * and what it requires of the call. */
struct Algo {
  uint32_t magic;
  int32_t compute, scale, abtype, cdtype;
  uint32_t epilogue;
  uint32_t align[4]; /* bytes every matrix of A, B, C, D must be aligned to */
  uint64_t ws;       /* workspace bytes it needs */
};
static_assert(sizeof(Algo) <= sizeof(cublasLtMatmulAlgo_t), "Algo does not fit the opaque algo");

/* One refusal: print "cudaemu cublasLt: <call>: <why>" and return `st`. */
cublasStatus_t refuse(cublasStatus_t st, const char *call, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "cudaemu cublasLt: %s: %s -> %s\n", call, msg, cublasLtGetStatusName(st));
  return st;
}

size_t type_size(int32_t t) {
  switch (t) {
  case CUDA_R_8I: case CUDA_R_8U: case CUDA_R_8F_E4M3: case CUDA_R_8F_E5M2: return 1;
  case CUDA_R_16F: case CUDA_R_16BF: case CUDA_C_8I: return 2;
  case CUDA_R_32F: case CUDA_R_32I: case CUDA_C_16F: case CUDA_C_16BF: return 4;
  case CUDA_R_64F: case CUDA_C_32F: return 8;
  case CUDA_C_64F: return 16;
  default: return 0;
  }
}

const char *type_name(int32_t t) {
  switch (t) {
  case CUDA_R_32F: return "CUDA_R_32F";
  case CUDA_R_16BF: return "CUDA_R_16BF";
  case CUDA_R_16F: return "CUDA_R_16F";
  case CUDA_R_64F: return "CUDA_R_64F";
  case CUDA_R_8I: return "CUDA_R_8I";
  case CUDA_R_32I: return "CUDA_R_32I";
  case CUDA_C_32F: return "CUDA_C_32F";
  case CUDA_C_64F: return "CUDA_C_64F";
  case CUDA_C_8I: return "CUDA_C_8I";
  default: return "(other cudaDataType)";
  }
}

/* cuBLAS docs, "cublasLtMatmul()", table of supported data types (regular,
 * non-IMMA, non-FP8 kernels): computeType, scaleType, Atype = Btype,
 * Ctype = Dtype. */
struct TypeRow {
  int32_t compute, scale, ab, cd;
};
const TypeRow kTypeTable[] = {
    {CUBLAS_COMPUTE_16F, CUDA_R_16F, CUDA_R_16F, CUDA_R_16F},
    {CUBLAS_COMPUTE_16F_PEDANTIC, CUDA_R_16F, CUDA_R_16F, CUDA_R_16F},
    {CUBLAS_COMPUTE_32I, CUDA_R_32I, CUDA_R_8I, CUDA_R_32I},
    {CUBLAS_COMPUTE_32I_PEDANTIC, CUDA_R_32I, CUDA_R_8I, CUDA_R_32I},
    {CUBLAS_COMPUTE_32I, CUDA_R_32F, CUDA_R_8I, CUDA_R_8I},
    {CUBLAS_COMPUTE_32I_PEDANTIC, CUDA_R_32F, CUDA_R_8I, CUDA_R_8I},
    {CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF},
    {CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16F, CUDA_R_16F},
    {CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_8I, CUDA_R_32F},
    {CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_32F},
    {CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16F, CUDA_R_32F},
    {CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F},
    {CUBLAS_COMPUTE_32F, CUDA_C_32F, CUDA_C_8I, CUDA_C_32F},
    {CUBLAS_COMPUTE_32F, CUDA_C_32F, CUDA_C_32F, CUDA_C_32F},
    {CUBLAS_COMPUTE_32F_PEDANTIC, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF},
    {CUBLAS_COMPUTE_32F_PEDANTIC, CUDA_R_32F, CUDA_R_16F, CUDA_R_16F},
    {CUBLAS_COMPUTE_32F_PEDANTIC, CUDA_R_32F, CUDA_R_8I, CUDA_R_32F},
    {CUBLAS_COMPUTE_32F_PEDANTIC, CUDA_R_32F, CUDA_R_16BF, CUDA_R_32F},
    {CUBLAS_COMPUTE_32F_PEDANTIC, CUDA_R_32F, CUDA_R_16F, CUDA_R_32F},
    {CUBLAS_COMPUTE_32F_PEDANTIC, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F},
    {CUBLAS_COMPUTE_32F_PEDANTIC, CUDA_C_32F, CUDA_C_8I, CUDA_C_32F},
    {CUBLAS_COMPUTE_32F_PEDANTIC, CUDA_C_32F, CUDA_C_32F, CUDA_C_32F},
    {CUBLAS_COMPUTE_32F_FAST_16F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F},
    {CUBLAS_COMPUTE_32F_FAST_16BF, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F},
    {CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F},
    {CUBLAS_COMPUTE_32F_FAST_16F, CUDA_C_32F, CUDA_C_32F, CUDA_C_32F},
    {CUBLAS_COMPUTE_32F_FAST_16BF, CUDA_C_32F, CUDA_C_32F, CUDA_C_32F},
    {CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_C_32F, CUDA_C_32F, CUDA_C_32F},
    {CUBLAS_COMPUTE_64F, CUDA_R_64F, CUDA_R_64F, CUDA_R_64F},
    {CUBLAS_COMPUTE_64F_PEDANTIC, CUDA_R_64F, CUDA_R_64F, CUDA_R_64F},
    {CUBLAS_COMPUTE_64F, CUDA_C_64F, CUDA_C_64F, CUDA_C_64F},
    {CUBLAS_COMPUTE_64F_PEDANTIC, CUDA_C_64F, CUDA_C_64F, CUDA_C_64F},
};

bool in_type_table(int32_t compute, int32_t scale, int32_t ab, int32_t cd) {
  for (const TypeRow &r : kTypeTable)
    if (r.compute == compute && r.scale == scale && r.ab == ab && r.cd == cd) return true;
  return false;
}

/* The rows of the table this emulation computes: float32 accumulation of
 * float32 or bf16 operands. */
bool emulated_types(int32_t compute, int32_t scale, int32_t ab, int32_t cd) {
  return (compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC) &&
         scale == CUDA_R_32F && (ab == CUDA_R_32F || ab == CUDA_R_16BF) &&
         (cd == CUDA_R_32F || cd == CUDA_R_16BF);
}

Handle *H(cublasLtHandle_t h) {
  Handle *p = reinterpret_cast<Handle *>(h);
  return p && p->magic == kHandleMagic ? p : nullptr;
}
Layout *L(cublasLtMatrixLayout_t l) {
  Layout *p = reinterpret_cast<Layout *>(l);
  return p && p->magic == kLayoutMagic ? p : nullptr;
}
Desc *D(cublasLtMatmulDesc_t d) {
  Desc *p = reinterpret_cast<Desc *>(d);
  return p && p->magic == kDescMagic ? p : nullptr;
}
Pref *P(cublasLtMatmulPreference_t q) {
  Pref *p = reinterpret_cast<Pref *>(q);
  return p && p->magic == kPrefMagic ? p : nullptr;
}

/* ---- attribute access: the header's rule for every Set/GetAttribute:
 * CUBLAS_STATUS_INVALID_VALUE "if buf is NULL or sizeInBytes doesn't match
 * size of internal storage for selected attribute"; Get with sizeInBytes 0
 * reports the size through sizeWritten (INVALID_VALUE without it). -------- */
struct Field {
  void *p;
  size_t size;
};

cublasStatus_t set_field(const char *call, int attr, Field f, const void *buf, size_t n) {
  if (!f.p)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  "attribute %d is documented but not emulated", attr);
  if (!buf || n != f.size)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  "attribute %d: buf %p, sizeInBytes %zu, its storage is %zu bytes", attr, buf, n,
                  f.size);
  memcpy(f.p, buf, n);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t get_field(const char *call, int attr, Field f, void *buf, size_t n,
                         size_t *written) {
  if (!f.p)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  "attribute %d is documented but not emulated", attr);
  if (n == 0) {
    if (!written)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "sizeInBytes 0 and sizeWritten NULL");
    *written = f.size;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (!buf || n != f.size)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  "attribute %d: buf %p, sizeInBytes %zu, its storage is %zu bytes", attr, buf, n,
                  f.size);
  memcpy(buf, f.p, n);
  if (written) *written = f.size;
  return CUBLAS_STATUS_SUCCESS;
}

Field layout_field(Layout *l, int attr) {
  switch (attr) {
  case CUBLASLT_MATRIX_LAYOUT_TYPE: return {&l->type, sizeof(uint32_t)};
  case CUBLASLT_MATRIX_LAYOUT_ORDER: return {&l->order, sizeof(int32_t)};
  case CUBLASLT_MATRIX_LAYOUT_ROWS: return {&l->rows, sizeof(uint64_t)};
  case CUBLASLT_MATRIX_LAYOUT_COLS: return {&l->cols, sizeof(uint64_t)};
  case CUBLASLT_MATRIX_LAYOUT_LD: return {&l->ld, sizeof(int64_t)};
  case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return {&l->batch, sizeof(int32_t)};
  case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return {&l->stride, sizeof(int64_t)};
  case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET: return {&l->plane, sizeof(int64_t)};
  case CUBLASLT_MATRIX_LAYOUT_BATCH_MODE: return {&l->batch_mode, sizeof(uint32_t)};
  default: return {nullptr, 0};
  }
}

Field desc_field(Desc *d, int attr) {
  switch (attr) {
  case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return {&d->compute, sizeof(int32_t)};
  case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return {&d->scale, sizeof(int32_t)};
  case CUBLASLT_MATMUL_DESC_POINTER_MODE: return {&d->pointer_mode, sizeof(int32_t)};
  case CUBLASLT_MATMUL_DESC_TRANSA: return {&d->transa, sizeof(int32_t)};
  case CUBLASLT_MATMUL_DESC_TRANSB: return {&d->transb, sizeof(int32_t)};
  case CUBLASLT_MATMUL_DESC_TRANSC: return {&d->transc, sizeof(int32_t)};
  case CUBLASLT_MATMUL_DESC_FILL_MODE: return {&d->fill, sizeof(int32_t)};
  case CUBLASLT_MATMUL_DESC_EPILOGUE: return {&d->epilogue, sizeof(uint32_t)};
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return {&d->bias, sizeof(void *)};
  case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return {&d->bias_stride, sizeof(int64_t)};
  case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return {&d->bias_type, sizeof(int32_t)};
  default: return {nullptr, 0};
  }
}

Field pref_field(Pref *p, int attr) {
  switch (attr) {
  case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return {&p->search, sizeof(uint32_t)};
  case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return {&p->max_ws, sizeof(uint64_t)};
  case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: return {&p->reduction_mask, sizeof(uint32_t)};
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return {&p->align[0], sizeof(uint32_t)};
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return {&p->align[1], sizeof(uint32_t)};
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return {&p->align[2], sizeof(uint32_t)};
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return {&p->align[3], sizeof(uint32_t)};
  case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT: return {&p->max_waves, sizeof(float)};
  case CUBLASLT_MATMUL_PREF_IMPL_MASK: return {&p->impl_mask, sizeof(uint64_t)};
  default: return {nullptr, 0};
  }
}

/* ---- the problem a descriptor set describes ------------------------------ */

/* One matrix operand as the kernel reads it: element (i, j) of op(X) of
 * batch b at p + es·(b·stride + i·si + j·sj). */
struct Operand {
  const char *p;
  int32_t type;
  int64_t si, sj, stride;
};

struct Problem {
  uint64_t m, n, k;
  int32_t batch;
  int32_t abtype, cdtype;
  Layout a, b, c, d; /* copies: a queued product must not see later changes */
  int opa, opb;      /* 1: transposed */
  uint32_t epilogue;
  int32_t bias_type;
};

const char *order_name(int32_t o) { return o == CUBLASLT_ORDER_ROW ? "ROW" : "COL"; }

/* Checks shared by the heuristic and cublasLtMatmul; fills *pr. */
cublasStatus_t check_problem(const char *call, const Desc *op, const Layout *A, const Layout *B,
                             const Layout *C, const Layout *Dd, Problem *pr) {
  /* "cublasLtMatmul()" supported-types table: Atype must equal Btype and
   * Ctype equal Dtype outside the FP8 kernels, and the quadruple must be a
   * row of the table; otherwise no kernel exists (NOT_SUPPORTED). */
  if (A->type != B->type || C->type != Dd->type ||
      !in_type_table(op->compute, op->scale, A->type, C->type))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  "types compute %d, scale %s, A %s, B %s, C %s, D %s are not a row of the "
                  "supported-types table (cuBLAS docs, cublasLtMatmul())",
                  op->compute, type_name(op->scale), type_name(A->type), type_name(B->type),
                  type_name(C->type), type_name(Dd->type));
  if (!emulated_types(op->compute, op->scale, A->type, C->type))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  "compute %d with A/B %s and C/D %s is documented but not emulated "
                  "(emulation limit: CUBLAS_COMPUTE_32F[_PEDANTIC], float32/bf16)",
                  op->compute, type_name(A->type), type_name(C->type));
  /* "cublasLtMatmulDescAttributes_t": TRANSC "Currently only CUBLAS_OP_N is
   * supported"; TRANSA/TRANSB take cublasOperation_t (OP_C of a real type is
   * OP_T; OP_CONJG is "not supported"). */
  if (op->transc != CUBLAS_OP_N)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  "TRANSC %d: only CUBLAS_OP_N is supported (cublasLtMatmulDescAttributes_t)",
                  op->transc);
  for (int t : {op->transa, op->transb})
    if (t != CUBLAS_OP_N && t != CUBLAS_OP_T && t != CUBLAS_OP_C)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                    "TRANSA/TRANSB %d is not a supported cublasOperation_t "
                    "(cublasLtMatmulDescAttributes_t)",
                    t);
  if (op->pointer_mode != CUBLASLT_POINTER_MODE_HOST)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  "pointer mode %d is documented but not emulated (host scalars only)",
                  op->pointer_mode);
  if (op->fill != CUBLAS_FILL_MODE_FULL)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "fill mode %d is not emulated", op->fill);
  if (op->epilogue != CUBLASLT_EPILOGUE_DEFAULT && op->epilogue != CUBLASLT_EPILOGUE_BIAS)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  "epilogue %u is documented but not emulated (DEFAULT and BIAS are)",
                  op->epilogue);
  /* "cublasLtMatmulDescAttributes_t", BIAS_DATA_TYPE: bias elements have
   * D's type (default -1) outside the IMMA and FP8 kernels. */
  if (op->epilogue == CUBLASLT_EPILOGUE_BIAS && op->bias_type != -1 &&
      op->bias_type != Dd->type)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  "bias type %s with D %s: bias has D's type "
                  "(cublasLtMatmulDescAttributes_t, BIAS_DATA_TYPE)",
                  type_name(op->bias_type), type_name(Dd->type));

  const Layout *all[4] = {A, B, C, Dd};
  const char *nm[4] = {"A", "B", "C", "D"};
  for (int x = 0; x < 4; x++) {
    const Layout *l = all[x];
    /* "cublasLtOrder_t": the tiled orders (COL32, COL4_4R2_8C, COL32_2R_4R4)
     * are for the IMMA kernels only. */
    if (l->order != CUBLASLT_ORDER_COL && l->order != CUBLASLT_ORDER_ROW)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                    "%s order %d: only COL and ROW apply to non-IMMA kernels (cublasLtOrder_t)",
                    nm[x], l->order);
    if (l->batch_mode != CUBLASLT_BATCH_MODE_STRIDED || l->plane != 0)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                    "%s: pointer-array batches and planar complex are not emulated", nm[x]);
    /* "cublasLtMatrixLayoutAttribute_t", ROWS/COLS: "Usually only values
     * that can be expressed as int32_t are supported". */
    if (l->rows > INT32_MAX || l->cols > INT32_MAX)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                    "%s is %llu x %llu: beyond int32 sizes (cublasLtMatrixLayoutAttribute_t)",
                    nm[x], (unsigned long long)l->rows, (unsigned long long)l->cols);
    /* "cublasLtMatrixLayoutAttribute_t", LD: non-negative and large enough
     * that the matrix's elements do not overlap ("greater or equal to ROWS
     * in case of CUBLASLT_ORDER_COL"; COLS for ROW). C alone may have
     * ld 0: "cublasLtMatmul()": out of place, "the leading dimension of C
     * can be 0 to achieve row or column broadcast" (C == D is checked by
     * cublasLtMatmul, which sees the pointers). */
    uint64_t need = std::max<uint64_t>(1, l->order == CUBLASLT_ORDER_COL ? l->rows : l->cols);
    bool c_broadcast = x == 2 && l->ld == 0;
    if (l->ld < 0 || (!c_broadcast && (uint64_t)l->ld < need))
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                    "%s (%llu x %llu, order %s): leading dimension %lld < %llu "
                    "(cublasLtMatrixLayoutAttribute_t, LD)",
                    nm[x], (unsigned long long)l->rows, (unsigned long long)l->cols,
                    order_name(l->order), (long long)l->ld, (unsigned long long)need);
    /* "cublasLtMatrixLayoutAttribute_t", BATCH_COUNT (default 1) and
     * STRIDED_BATCH_OFFSET; the emulation takes non-negative strides. */
    if (l->batch < 1)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "%s batch count %d < 1", nm[x],
                    l->batch);
    if (l->stride < 0)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                    "%s: negative batch stride %lld is not emulated", nm[x],
                    (long long)l->stride);
  }
  /* "cublasLtMatmul()": op(A) is m x k, op(B) k x n, C and D m x n; every
   * layout describes the same number of products. */
  int opa = op->transa != CUBLAS_OP_N, opb = op->transb != CUBLAS_OP_N;
  uint64_t m = Dd->rows, n = Dd->cols;
  uint64_t am = opa ? A->cols : A->rows, k = opa ? A->rows : A->cols;
  uint64_t bk = opb ? B->cols : B->rows, bn = opb ? B->rows : B->cols;
  if (am != m || bk != k || bn != n || C->rows != m || C->cols != n)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  "shapes do not chain: op(A) %llu x %llu, op(B) %llu x %llu, C %llu x %llu, "
                  "D %llu x %llu (cublasLtMatmul())",
                  (unsigned long long)am, (unsigned long long)k, (unsigned long long)bk,
                  (unsigned long long)bn, (unsigned long long)C->rows,
                  (unsigned long long)C->cols, (unsigned long long)m, (unsigned long long)n);
  if (A->batch != Dd->batch || B->batch != Dd->batch || C->batch != Dd->batch)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  "batch counts differ: A %d, B %d, C %d, D %d (cublasLtMatmul())", A->batch,
                  B->batch, C->batch, Dd->batch);
  /* "cublasLtMatmul()": out of place, C and D "must have the same data
   * type, number of rows, number of columns, batch size, and memory order". */
  if (C->order != Dd->order)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  "C order %s, D order %s: C and D must have the same memory order "
                  "(cublasLtMatmul())",
                  order_name(C->order), order_name(Dd->order));
  pr->m = m, pr->n = n, pr->k = k, pr->batch = Dd->batch;
  pr->abtype = A->type, pr->cdtype = C->type;
  pr->a = *A, pr->b = *B, pr->c = *C, pr->d = *Dd;
  pr->opa = opa, pr->opb = opb;
  pr->epilogue = op->epilogue;
  pr->bias_type = Dd->type;
  return CUBLAS_STATUS_SUCCESS;
}

/* The largest power of two dividing v (capped at `cap`); v == 0 gives cap. */
uint32_t pow2_of(uint64_t v, uint32_t cap) {
  if (v == 0) return cap;
  uint64_t p = v & (~v + 1);
  return p > cap ? cap : (uint32_t)p;
}

/* The emulated heuristic: one algorithm, or none (returns NOT_SUPPORTED). */
cublasStatus_t pick_algo(const char *call, const Desc *op, const Problem &pr,
                         const uint32_t pref_align[4], uint64_t max_ws, Algo *out,
                         uint64_t *ws_out) {
  const Layout *all[4] = {&pr.a, &pr.b, &pr.c, &pr.d};
  const char *nm[4] = {"A", "B", "C", "D"};
  Algo al;
  memset(&al, 0, sizeof al);
  al.magic = kAlgoMagic;
  al.compute = op->compute, al.scale = op->scale, al.abtype = pr.abtype, al.cdtype = pr.cdtype;
  al.epilogue = op->epilogue;
  for (int x = 0; x < 4; x++) {
    const Layout *l = all[x];
    uint32_t es = (uint32_t)type_size(l->type);
    /* "cublasLtMatmulPreferenceAttributes_t", MIN_ALIGNMENT_*_BYTES: "Selecting
     * a smaller value will exclude algorithms that can not work with matrix
     * X that is not as strictly aligned as they need"; every algorithm reads
     * whole elements, so a promise below the element size leaves none. */
    uint32_t pa = pref_align[x];
    if (pa < es)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                    "no algorithm: matrix %s promised %u-byte alignment, below its %u-byte "
                    "elements (cublasLtMatmulPreferenceAttributes_t, MIN_ALIGNMENT_%s_BYTES)",
                    nm[x], pa, es, nm[x]);
    uint32_t req = pow2_of(pa, kVectorBytes);
    req = std::min(req, pow2_of((uint64_t)l->ld * es, kVectorBytes));
    if (l->batch > 1) req = std::min(req, pow2_of((uint64_t)l->stride * es, kVectorBytes));
    al.align[x] = std::max(req, es);
  }
  uint64_t split = (uint64_t)4 * pr.m * pr.n * (uint64_t)pr.batch;
  al.ws = std::min(std::min(max_ws, kSplitKBytes), split);
  *out = al;
  *ws_out = al.ws;
  return CUBLAS_STATUS_SUCCESS;
}

/* ---- the kernel ------------------------------------------------------------ */

inline float ld_elem(const char *p, int32_t type, int64_t idx) {
  if (type == CUDA_R_32F) {
    float v;
    memcpy(&v, p + 4 * idx, 4);
    return v;
  }
  uint16_t h;
  memcpy(&h, p + 2 * idx, 2);
  uint32_t u = (uint32_t)h << 16;
  float v;
  memcpy(&v, &u, 4);
  return v;
}

/* float -> bf16 bits, round to nearest even; NaN stays a quiet NaN. */
inline uint16_t to_bf16(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

inline void st_elem(char *p, int32_t type, int64_t idx, float v) {
  if (type == CUDA_R_32F) {
    memcpy(p + 4 * idx, &v, 4);
  } else {
    uint16_t h = to_bf16(v);
    memcpy(p + 2 * idx, &h, 2);
  }
}

/* The operand view of a layout: element (i, j) of op(X). */
Operand view(const void *p, const Layout &l, int trans) {
  int64_t si = l.order == CUBLASLT_ORDER_COL ? 1 : l.ld; /* stride along rows of X */
  int64_t sj = l.order == CUBLASLT_ORDER_COL ? l.ld : 1; /* along columns of X */
  Operand o;
  o.p = (const char *)p;
  o.type = l.type;
  o.si = trans ? sj : si;
  o.sj = trans ? si : sj;
  o.stride = l.stride;
  return o;
}

/* Bytes spanned by all matrices of a layout: the last element's offset + 1. */
uint64_t span_bytes(const Layout &l) {
  if (l.rows == 0 || l.cols == 0) return 0;
  uint64_t es = type_size(l.type);
  uint64_t last = l.order == CUBLASLT_ORDER_COL ? (l.cols - 1) * (uint64_t)l.ld + (l.rows - 1)
                                                : (l.rows - 1) * (uint64_t)l.ld + (l.cols - 1);
  last += (uint64_t)(l.batch - 1) * (uint64_t)l.stride;
  return (last + 1) * es;
}

struct Job {
  Problem pr;
  Operand a, b, c;
  char *d;
  int64_t d_si, d_sj, d_stride;
  const char *bias;
  int64_t bias_stride;
  float alpha, beta;
  char *ws;
  uint64_t ws_bytes;
};

const int64_t MB = 64, NB = 256, KB = 128; /* tile of D rows, D columns, k */

/* D tile by tile: pack op(A) (mb x kb) and op(B) (kb x nb) as float, then
 * acc[i][j] += a[i][p]·b[p][j] in an i-p-j loop (p increasing: each element
 * sums its products in k order), then the epilogue. */
void run_job(const Job &jb) {
  const Problem &pr = jb.pr;
  if (jb.ws_bytes) memset(jb.ws, 0xff, jb.ws_bytes); /* the split-K buffer's scribbles */
  std::vector<float> ap((size_t)(MB * KB)), bp((size_t)(KB * NB)), acc((size_t)(MB * NB));
  const int64_t m = (int64_t)pr.m, n = (int64_t)pr.n, k = (int64_t)pr.k;
  for (int32_t bt = 0; bt < pr.batch; bt++) {
    const char *A = jb.a.p, *B = jb.b.p;
    int64_t aoff = (int64_t)bt * jb.a.stride, boff = (int64_t)bt * jb.b.stride;
    int64_t coff = (int64_t)bt * jb.c.stride, doff = (int64_t)bt * jb.d_stride;
    for (int64_t i0 = 0; i0 < m; i0 += MB) {
      int64_t mb = std::min(MB, m - i0);
      for (int64_t j0 = 0; j0 < n; j0 += NB) {
        int64_t nb = std::min(NB, n - j0);
        std::fill(acc.begin(), acc.begin() + mb * nb, 0.0f);
        for (int64_t p0 = 0; p0 < k; p0 += KB) {
          int64_t kb = std::min(KB, k - p0);
          for (int64_t i = 0; i < mb; i++)
            for (int64_t p = 0; p < kb; p++)
              ap[(size_t)(i * kb + p)] =
                  ld_elem(A, jb.a.type, aoff + (i0 + i) * jb.a.si + (p0 + p) * jb.a.sj);
          for (int64_t p = 0; p < kb; p++)
            for (int64_t j = 0; j < nb; j++)
              bp[(size_t)(p * nb + j)] =
                  ld_elem(B, jb.b.type, boff + (p0 + p) * jb.b.si + (j0 + j) * jb.b.sj);
          for (int64_t i = 0; i < mb; i++) {
            float *crow = acc.data() + i * nb;
            const float *arow = ap.data() + i * kb;
            for (int64_t p = 0; p < kb; p++) {
              const float a = arow[p];
              const float *brow = bp.data() + p * nb;
              for (int64_t j = 0; j < nb; j++) crow[j] += a * brow[j];
            }
          }
        }
        for (int64_t i = 0; i < mb; i++)
          for (int64_t j = 0; j < nb; j++) {
            float v = jb.alpha * acc[(size_t)(i * nb + j)];
            int64_t gi = i0 + i, gj = j0 + j;
            if (jb.beta != 0.0f)
              v += jb.beta * ld_elem(jb.c.p, jb.c.type, coff + gi * jb.c.si + gj * jb.c.sj);
            if (jb.bias)
              v += ld_elem(jb.bias, pr.bias_type, (int64_t)bt * jb.bias_stride + gi);
            st_elem(jb.d, pr.cdtype, doff + gi * jb.d_si + gj * jb.d_sj, v);
          }
      }
    }
  }
}

/* Where a matrix lives must be the stream's device ("cublasLtMatmul()":
 * A, B, C, D, bias and workspace are device pointers). */
cublasStatus_t check_device(const char *what, const void *p, uint64_t bytes, int dev) {
  if (bytes == 0) return CUBLAS_STATUS_SUCCESS;
  int w = cudaemu::where(p, bytes);
  if (w == dev) return CUBLAS_STATUS_SUCCESS;
  if (w == -1)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul",
                  "%s %p is not device memory (cublasLtMatmul() takes device pointers)", what, p);
  if (w == -2)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul",
                  "%s %p + %llu bytes runs past its device allocation (or it was freed)", what,
                  p, (unsigned long long)bytes);
  return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul",
                "%s %p is memory of device %d, the stream's device is %d", what, p, w, dev);
}

uint32_t ptr_align(const void *p) { return pow2_of((uint64_t)(uintptr_t)p, 256); }

} // namespace

/* ======================================================================== */
extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle) {
  if (!lightHandle) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate", "handle NULL");
  Handle *h = new (std::nothrow) Handle;
  if (!h) return CUBLAS_STATUS_ALLOC_FAILED;
  h->magic = kHandleMagic;
  h->device = cudaemu::current_device();
  *lightHandle = reinterpret_cast<cublasLtHandle_t>(h);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  Handle *h = H(lightHandle);
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->magic = 0;
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}

const char *cublasLtGetStatusName(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
  case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
  case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

const char *cublasLtGetStatusString(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "success";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
  case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
  case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
  case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
  case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
  case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
  case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
  default: return "unknown error";
  }
}

size_t cublasLtGetVersion(void) { return 130000; }

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (!matLayout)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate", "matLayout NULL");
  Layout *l = new (std::nothrow) Layout;
  if (!l) return CUBLAS_STATUS_ALLOC_FAILED;
  memset(l, 0, sizeof *l);
  l->magic = kLayoutMagic;
  l->type = (int32_t)type;
  l->order = CUBLASLT_ORDER_COL;
  l->batch = 1;
  l->rows = rows, l->cols = cols, l->ld = ld;
  *matLayout = reinterpret_cast<cublasLtMatrixLayout_t>(l);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  Layout *l = L(matLayout);
  if (!l) return matLayout ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_SUCCESS;
  l->magic = 0;
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t sizeInBytes) {
  Layout *l = L(matLayout);
  if (!l)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutSetAttribute",
                  "not a layout");
  return set_field("cublasLtMatrixLayoutSetAttribute", attr, layout_field(l, attr), buf,
                   sizeInBytes);
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t matLayout,
                                                cublasLtMatrixLayoutAttribute_t attr, void *buf,
                                                size_t sizeInBytes, size_t *sizeWritten) {
  Layout *l = L(matLayout);
  if (!l)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutGetAttribute",
                  "not a layout");
  return get_field("cublasLtMatrixLayoutGetAttribute", attr, layout_field(l, attr), buf,
                   sizeInBytes, sizeWritten);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc,
                                        cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  if (!matmulDesc)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate", "matmulDesc NULL");
  Desc *d = new (std::nothrow) Desc;
  if (!d) return CUBLAS_STATUS_ALLOC_FAILED;
  memset(d, 0, sizeof *d);
  d->magic = kDescMagic;
  d->compute = (int32_t)computeType;
  d->scale = (int32_t)scaleType;
  d->pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  d->transa = d->transb = d->transc = CUBLAS_OP_N;
  d->fill = CUBLAS_FILL_MODE_FULL;
  d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  d->bias_type = -1;
  *matmulDesc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  Desc *d = D(matmulDesc);
  if (!d) return matmulDesc ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_SUCCESS;
  d->magic = 0;
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t sizeInBytes) {
  Desc *d = D(matmulDesc);
  if (!d)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute",
                  "not a matmul descriptor");
  return set_field("cublasLtMatmulDescSetAttribute", attr, desc_field(d, attr), buf,
                   sizeInBytes);
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr, void *buf,
                                              size_t sizeInBytes, size_t *sizeWritten) {
  Desc *d = D(matmulDesc);
  if (!d)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescGetAttribute",
                  "not a matmul descriptor");
  return get_field("cublasLtMatmulDescGetAttribute", attr, desc_field(d, attr), buf,
                   sizeInBytes, sizeWritten);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
  if (!pref)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate", "pref NULL");
  Pref *p = new (std::nothrow) Pref;
  if (!p) return CUBLAS_STATUS_ALLOC_FAILED;
  memset(p, 0, sizeof *p);
  p->magic = kPrefMagic;
  p->search = CUBLASLT_SEARCH_BEST_FIT;
  p->max_ws = 0;                                   /* "default: 0 - no workspace allowed" */
  p->reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
  p->align[0] = p->align[1] = p->align[2] = p->align[3] = 256; /* "default: 256" */
  p->impl_mask = ~(uint64_t)0;
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(p);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  Pref *p = P(pref);
  if (!p) return pref ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_SUCCESS;
  p->magic = 0;
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t sizeInBytes) {
  Pref *p = P(pref);
  if (!p)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceSetAttribute",
                  "not a preference");
  return set_field("cublasLtMatmulPreferenceSetAttribute", attr, pref_field(p, attr), buf,
                   sizeInBytes);
}

cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    void *buf, size_t sizeInBytes,
                                                    size_t *sizeWritten) {
  Pref *p = P(pref);
  if (!p)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceGetAttribute",
                  "not a preference");
  return get_field("cublasLtMatmulPreferenceGetAttribute", attr, pref_field(p, attr), buf,
                   sizeInBytes, sizeWritten);
}

/* "cublasLtMatmulAlgoGetHeuristic()": INVALID_VALUE "if requestedAlgoCount
 * is less or equal to zero"; NOT_SUPPORTED "if no heuristic function
 * available for current configuration" (with returnAlgoCount 0: no
 * algorithm); else SUCCESS with results[0 .. returnAlgoCount). */
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle,
                                              cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc,
                                              cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc,
                                              cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference,
                                              int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int *returnAlgoCount) {
  const char *call = "cublasLtMatmulAlgoGetHeuristic";
  if (returnAlgoCount) *returnAlgoCount = 0;
  if (!H(lightHandle)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, call, "handle not created");
  const Desc *op = D(operationDesc);
  const Layout *A = L(Adesc), *B = L(Bdesc), *C = L(Cdesc), *Dd = L(Ddesc);
  const Pref *pf = P(preference);
  if (!op || !A || !B || !C || !Dd || !pf || !heuristicResultsArray || !returnAlgoCount)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "a descriptor or output is NULL");
  if (requestedAlgoCount <= 0)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "requestedAlgoCount %d <= 0",
                  requestedAlgoCount);
  Problem pr;
  cublasStatus_t st = check_problem(call, op, A, B, C, Dd, &pr);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  Algo al;
  uint64_t ws = 0;
  st = pick_algo(call, op, pr, pf->align, pf->max_ws, &al, &ws);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  cublasLtMatmulHeuristicResult_t &r = heuristicResultsArray[0];
  memset(&r, 0, sizeof r);
  memcpy(&r.algo, &al, sizeof al);
  r.workspaceSize = (size_t)ws;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                              const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
                              const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
                              const void *C, cublasLtMatrixLayout_t Cdesc, void *Dp,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
                              void *workspace, size_t workspaceSizeInBytes,
                              cudaStream_t stream) {
  const char *call = "cublasLtMatmul";
  /* "cublasLtMatmul()": NOT_INITIALIZED "if cuBLASLt handle has not been
   * initialized"; INVALID_VALUE "if the parameters are unexpectedly NULL, in
   * conflict or in an impossible configuration". A NULL Cdesc means "equal
   * to Ddesc". */
  if (!H(lightHandle)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, call, "handle not created");
  const Desc *op = D(computeDesc);
  const Layout *La = L(Adesc), *Lb = L(Bdesc), *Ld = L(Ddesc);
  const Layout *Lc = Cdesc ? L(Cdesc) : Ld;
  if (!op || !La || !Lb || !Lc || !Ld)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "a descriptor is NULL or destroyed");
  if (!alpha || !beta) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "alpha or beta NULL");
  Problem pr;
  cublasStatus_t st = check_problem(call, op, La, Lb, Lc, Ld, &pr);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  float fa, fb; /* host pointer mode: read now, as the library does */
  memcpy(&fa, alpha, sizeof fa);
  memcpy(&fb, beta, sizeof fb);

  /* "cublasLtMatmul()": in place (C == D) needs Cdesc equal to Ddesc;
   * otherwise C and D are different matrices (no partial overlap). */
  if (C && C == Dp && (Lc->ld != Ld->ld || Lc->stride != Ld->stride))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  "in place (C == D) with ldc %lld / ldd %lld, batch strides %lld / %lld: "
                  "in-place needs Cdesc equal to Ddesc (cublasLtMatmul())",
                  (long long)Lc->ld, (long long)Ld->ld, (long long)Lc->stride,
                  (long long)Ld->stride);
  uint64_t bytes[4] = {span_bytes(pr.a), span_bytes(pr.b), span_bytes(pr.c), span_bytes(pr.d)};
  if (C && C != Dp && fb != 0.0f) {
    uintptr_t c0 = (uintptr_t)C, d0 = (uintptr_t)Dp;
    if (c0 < d0 + bytes[3] && d0 < c0 + bytes[2])
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                    "C %p and D %p overlap without being the same matrix (cublasLtMatmul(): "
                    "in-place means C == D)",
                    C, Dp);
  }
  bool empty = pr.m == 0 || pr.n == 0;
  const void *ptrs[4] = {A, B, C, Dp};
  const char *nm[4] = {"A", "B", "C", "D"};
  bool needed[4] = {pr.k > 0, pr.k > 0, fb != 0.0f, true};
  for (int x = 0; x < 4 && !empty; x++)
    if (needed[x] && !ptrs[x])
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "%s is NULL", nm[x]);
  const void *bias = op->epilogue == CUBLASLT_EPILOGUE_BIAS ? op->bias : nullptr;
  if (op->epilogue == CUBLASLT_EPILOGUE_BIAS && !bias && !empty)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  "epilogue BIAS without CUBLASLT_MATMUL_DESC_BIAS_POINTER");

  /* The algorithm: the caller's, which must match the problem
   * ("cublasLtMatmulAlgoCheck()": INVALID_VALUE "if matrix layout
   * descriptors or operation descriptor don't match algo descriptor"), or,
   * for algo NULL, "an implicit heuristics query with default search
   * preferences" — here with the pointers' own alignment and the given
   * workspace. */
  Algo al;
  if (algo) {
    memcpy(&al, algo, sizeof al);
    if (al.magic != kAlgoMagic || al.compute != op->compute || al.scale != op->scale ||
        al.abtype != pr.abtype || al.cdtype != pr.cdtype || al.epilogue != op->epilogue)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                    "the algorithm was not chosen for these types / this operation");
  } else {
    uint32_t pa[4];
    for (int x = 0; x < 4; x++) pa[x] = ptrs[x] ? ptr_align(ptrs[x]) : 256;
    uint64_t ws = 0;
    st = pick_algo(call, op, pr, pa, workspaceSizeInBytes, &al, &ws);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
  }
  /* "cublasLtMatmulPreferenceAttributes_t", MIN_ALIGNMENT_*_BYTES: the
   * algorithm relies on the alignment the preference promised; every
   * matrix of the batch (pointer + i·stride) must keep it. A pointer less
   * aligned than promised is a call "in conflict" with its algorithm. */
  for (int x = 0; x < 4 && !empty; x++) {
    if (!ptrs[x] || !needed[x]) continue;
    if ((uintptr_t)ptrs[x] % al.align[x] != 0)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                    "%s %p is not %u-byte aligned as its algorithm requires (the heuristic's "
                    "preference promised it: cublasLtMatmulPreferenceAttributes_t, "
                    "MIN_ALIGNMENT_%s_BYTES)",
                    nm[x], ptrs[x], al.align[x], nm[x]);
  }
  /* "cublasLtMatmul()": INVALID_VALUE "when workspaceSizeInBytes is less
   * than workspace required by the configured algo". */
  if (workspaceSizeInBytes < al.ws)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  "workspace of %zu bytes, the algorithm needs %llu (cublasLtMatmul())",
                  workspaceSizeInBytes, (unsigned long long)al.ws);
  if (al.ws && !workspace)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "workspace NULL, the algorithm needs %llu",
                  (unsigned long long)al.ws);
  if (empty) return CUBLAS_STATUS_SUCCESS;

  int dev = cudaemu::stream_device(stream);
  for (int x = 0; x < 4; x++)
    if (needed[x]) {
      st = check_device(nm[x], ptrs[x], bytes[x], dev);
      if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
  size_t bes = type_size(pr.bias_type);
  if (bias) {
    st = check_device("bias", bias,
                      (pr.m + (uint64_t)(pr.batch - 1) * (uint64_t)op->bias_stride) * bes, dev);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
  }
  if (al.ws) {
    st = check_device("workspace", workspace, al.ws, dev);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
  }

  Job jb;
  jb.pr = pr;
  jb.a = view(A, pr.a, pr.opa);
  jb.b = view(B, pr.b, pr.opb);
  jb.c = view(fb != 0.0f ? C : Dp, pr.c, 0);
  Operand dv = view(Dp, pr.d, 0);
  jb.d = (char *)Dp;
  jb.d_si = dv.si, jb.d_sj = dv.sj, jb.d_stride = dv.stride;
  jb.bias = (const char *)bias;
  jb.bias_stride = op->bias_stride;
  jb.alpha = fa, jb.beta = fb;
  jb.ws = (char *)workspace;
  jb.ws_bytes = al.ws;
  cudaError_t e = cudaemu::enqueue(
      stream,
      [jb]() {
        run_job(jb);
        return cudaSuccess;
      },
      "cublasLtMatmul");
  if (e != cudaSuccess)
    return refuse(CUBLAS_STATUS_EXECUTION_FAILED, call, "the stream refused the work (%s)",
                  cudaGetErrorString(e));
  return CUBLAS_STATUS_SUCCESS;
}

} /* extern "C" */
