/* mma.h — the WMMA API (nvcuda::wmma; Programming Guide, "Warp Matrix
 * Functions") on the emulated CUDA device, with NVIDIA's names and
 * signatures: fragments of bf16 (m16n16k16, m32n8k16, m8n32k16) and tf32
 * (m16n16k8) inputs with float32 accumulators, fill_fragment,
 * load_matrix_sync, store_matrix_sync, mma_sync, __float_to_tf32. No half
 * (the emulator has no cuda_fp16.h), no integer or sub-byte types.
 *
 * A fragment is distributed over the warp as on a GPU — num_elements and
 * sizeof are the toolkit's — but with an element-to-lane mapping of the
 * emulator's own (a scrambled one, different for matrix_a, matrix_b and the
 * accumulator, and from any GPU's): element-wise code over x[0 ..
 * num_elements) works, code that assumes a mapping gets wrong results.
 * mma_sync combines the warp's fragments: d = a·b + c in float32, every
 * product exact (bf16 and tf32 products fit a float), summed from c in the
 * order k = 0, 1, … (tf32 inputs: the low 13 mantissa bits ignored, as the
 * hardware does). The *_sync functions are a rendezvous of all 32 lanes of
 * the warp (src/fiber.cpp), which checks that every lane calls the same
 * function at the same place with the same arguments; the pointer must be
 * 256-bit aligned, ldm a multiple of 16 bytes, the matrix inside device,
 * pinned or the block's shared memory (src/wmma.cpp). Misuse fails the
 * launch with a message naming the kernel and the call site. Test code
 * only (tests/cudaemu). */
#ifndef TD_CUDAEMU_MMA_H
#define TD_CUDAEMU_MMA_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <string.h>

#include <type_traits>

namespace nvcuda {
namespace wmma {
struct row_major;
struct col_major;
struct matrix_a;
struct matrix_b;
struct accumulator;
namespace precision {
struct tf32;
}
enum layout_t { mem_row_major, mem_col_major };

template <class T>
struct helper_traits {
  typedef T element_type;
  typedef T storage_element_type;
  typedef T fill_argument_type;
};
template <>
struct helper_traits<precision::tf32> {
  typedef precision::tf32 element_type;
  typedef float storage_element_type;
  typedef float fill_argument_type;
};
} // namespace wmma
} // namespace nvcuda

namespace cudaemu {
namespace wmma_detail {
namespace w = ::nvcuda::wmma;

/* The base of every fragment, as the toolkit's __frag_base. */
template <class T, int size>
struct alignas(8) frag_base {
  enum { num_elements = size };
  enum { num_storage_elements = size };
  typedef T element_type;
  typedef typename w::helper_traits<T>::storage_element_type storage_element_type;
  storage_element_type x[size];
};

/* What wmma.cpp is told of a fragment: its use and element type, codes. */
enum { kMatrixA, kMatrixB, kAccumulator };
enum { kBf16, kFloat, kTf32 };
template <class Use>
struct use_code;
template <>
struct use_code<w::matrix_a> { static constexpr int value = kMatrixA; };
template <>
struct use_code<w::matrix_b> { static constexpr int value = kMatrixB; };
template <class T>
struct elem_code;
template <>
struct elem_code<__nv_bfloat16> { static constexpr int value = kBf16; };
template <>
struct elem_code<float> { static constexpr int value = kFloat; };
template <>
struct elem_code<w::precision::tf32> { static constexpr int value = kTf32; };
template <class L>
struct is_col_major : std::is_same<L, w::col_major> {};

/* The warp's operations (wmma.cpp). A fragment's tile is rows × cols of the
 * logical matrix (a: m × k, b: k × n, accumulator: m × n); `col_major` is
 * the layout in memory. */
void load(void *x, int use, int elem, int rows, int cols, const void *p, unsigned ldm,
          bool col_major, const char *file, int line);
void store(void *p, const float *x, int rows, int cols, unsigned ldm, bool col_major,
           const char *file, int line);
void mma(float *d, const void *a, const void *b, const float *c, int elem, int m, int n, int k,
         bool a_col, bool b_col, const char *file, int line);
} // namespace wmma_detail
} // namespace cudaemu

namespace nvcuda {
namespace wmma {

/* float -> tf32 (cvt.rna.tf32.f32): round to nearest, ties away from zero,
 * to 10 mantissa bits; the result is a float whose low 13 bits are 0. */
inline float __float_to_tf32(float in) {
  unsigned u;
  memcpy(&u, &in, sizeof u);
  if ((u & 0x7f800000u) != 0x7f800000u) { /* Inf and NaN stay as they are */
    u += 0x1000u;                        /* half a tf32 ulp, on the magnitude */
    u &= ~0x1fffu;
  }
  float r;
  memcpy(&r, &u, sizeof r);
  return r;
}

/* The fragments that exist (the toolkit's, for these types): any other
 * combination is an incomplete type, as on a GPU. */
template <class Use, int m, int n, int k, class T, class Layout = void>
class fragment;
#define CUDAEMU_WMMA_FRAGMENT(use, m, n, k, T, L, size)                                     \
  template <>                                                                               \
  class fragment<use, m, n, k, T, L> : public ::cudaemu::wmma_detail::frag_base<T, size> {};
#define CUDAEMU_WMMA_SHAPE(m, n, k, T)                                                      \
  CUDAEMU_WMMA_FRAGMENT(matrix_a, m, n, k, T, row_major, (m) * (k) / 32)                    \
  CUDAEMU_WMMA_FRAGMENT(matrix_a, m, n, k, T, col_major, (m) * (k) / 32)                    \
  CUDAEMU_WMMA_FRAGMENT(matrix_b, m, n, k, T, row_major, (k) * (n) / 32)                    \
  CUDAEMU_WMMA_FRAGMENT(matrix_b, m, n, k, T, col_major, (k) * (n) / 32)                    \
  CUDAEMU_WMMA_FRAGMENT(accumulator, m, n, k, float, void, (m) * (n) / 32)
CUDAEMU_WMMA_SHAPE(16, 16, 16, __nv_bfloat16)
CUDAEMU_WMMA_SHAPE(32, 8, 16, __nv_bfloat16)
CUDAEMU_WMMA_SHAPE(8, 32, 16, __nv_bfloat16)
CUDAEMU_WMMA_SHAPE(16, 16, 8, precision::tf32)
#undef CUDAEMU_WMMA_SHAPE
#undef CUDAEMU_WMMA_FRAGMENT

/* Every element of the fragment set to v (no rendezvous: each lane sets
 * its own elements, so lanes filling different values mix them). */
template <class T, int size>
inline void fill_fragment(::cudaemu::wmma_detail::frag_base<T, size> &f,
                          const typename helper_traits<T>::fill_argument_type &v) {
  typename helper_traits<T>::storage_element_type s = v;
  for (int i = 0; i < size; i++) f.x[i] = s;
}

/* The call site comes in as defaulted trailing arguments (as the warp
 * intrinsics of cudaemu_device.h take theirs), for the messages. */
template <class Use, int m, int n, int k, class T, class Layout>
inline typename std::enable_if<!std::is_void<Layout>::value>::type
load_matrix_sync(fragment<Use, m, n, k, T, Layout> &a,
                 const typename helper_traits<T>::storage_element_type *mptr, unsigned ldm,
                 const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
  constexpr int use = ::cudaemu::wmma_detail::use_code<Use>::value;
  ::cudaemu::wmma_detail::load(a.x, use, ::cudaemu::wmma_detail::elem_code<T>::value,
                               use == ::cudaemu::wmma_detail::kMatrixA ? m : k,
                               use == ::cudaemu::wmma_detail::kMatrixA ? k : n, mptr, ldm,
                               ::cudaemu::wmma_detail::is_col_major<Layout>::value, file, line);
}

template <int m, int n, int k, class T>
inline void load_matrix_sync(fragment<accumulator, m, n, k, T> &a, const T *mptr, unsigned ldm,
                             layout_t layout, const char *file = __builtin_FILE(),
                             int line = __builtin_LINE()) {
  ::cudaemu::wmma_detail::load(a.x, ::cudaemu::wmma_detail::kAccumulator,
                               ::cudaemu::wmma_detail::elem_code<T>::value, m, n, mptr, ldm,
                               layout == mem_col_major, file, line);
}

template <int m, int n, int k, class T>
inline void store_matrix_sync(T *mptr, const fragment<accumulator, m, n, k, T> &a, unsigned ldm,
                              layout_t layout, const char *file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  ::cudaemu::wmma_detail::store(mptr, a.x, m, n, ldm, layout == mem_col_major, file, line);
}

/* d = a·b + c (d may be c). */
template <int m, int n, int k, class T, class LA, class LB>
inline void mma_sync(fragment<accumulator, m, n, k, float> &d,
                     const fragment<matrix_a, m, n, k, T, LA> &a,
                     const fragment<matrix_b, m, n, k, T, LB> &b,
                     const fragment<accumulator, m, n, k, float> &c,
                     const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::cudaemu::wmma_detail::mma(d.x, a.x, b.x, c.x, ::cudaemu::wmma_detail::elem_code<T>::value, m,
                              n, k, ::cudaemu::wmma_detail::is_col_major<LA>::value,
                              ::cudaemu::wmma_detail::is_col_major<LB>::value, file, line);
}

} // namespace wmma
} // namespace nvcuda

#endif
