/* cudaemu_device.h — device code on the emulated CUDA device (C++ only;
 * cuda_runtime.h includes it): the execution-space qualifiers, the built-in
 * index variables, __syncthreads, the warp intrinsics, the rounded float
 * operations, static and dynamic __shared__ memory and cudaemu::launch,
 * which tests/cudaemu/rewrite.py substitutes for every
 * `kernel<<<grid, block, shmem, stream>>>(args)`.
 *
 * Execution model (tests/cudaemu/src/fiber.cpp implements it): a launch is
 * queued on its stream; the stream's worker thread runs the grid's blocks one
 * after another in a seeded permuted order, each block's threads as fibers
 * on that worker, switched only at __syncthreads and the warp intrinsics (in
 * a seeded random order, TD_CUDAEMU_SEED), so code that relies on an order
 * CUDA does not promise sees a different one. Device code reads its indices
 * through thread-local state set at each switch. Test code only. */
#ifndef TD_CUDAEMU_DEVICE_H
#define TD_CUDAEMU_DEVICE_H

#ifndef __cplusplus
#error "cudaemu_device.h is C++ (device code is compiled as C++17)"
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

/* ---- built-in vector types (vector_types.h) ------------------------------------ */
struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
      : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

/* ---- execution-space and other qualifiers: no meaning on the CPU (not
 * __noinline__: libstdc++'s headers spell __attribute__((__noinline__))) -- */
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(...)

/* The warp size (Programming Guide, "Built-in Variables": warpSize). */
constexpr int warpSize = 32;

namespace cudaemu {
namespace detail {

/* What device code reads of the thread it runs as. */
struct ThreadState {
  uint3 thread_idx, block_idx;
  dim3 block_dim, grid_dim;
};
/* The device thread (fiber) running on this OS thread; NULL outside kernels.
 * Initial-exec: device code reads it at every index access, and the
 * general-dynamic model's __tls_get_addr is slow (under ASan, intercepted). */
extern __thread const ThreadState *t_thread __attribute__((tls_model("initial-exec")));
/* Device code reached outside a kernel: a message, then abort. */
[[noreturn]] void outside_kernel(const char *what, const char *file, int line);

inline const ThreadState &current(const char *what, const char *file, int line) {
  const ThreadState *t = t_thread;
  if (!t) outside_kernel(what, file, line);
  return *t;
}

/* The warp-level operations, one rendezvous of the lanes named in the mask. */
enum WarpOp { kShflIdx, kShflUp, kShflDown, kShflXor, kSyncWarp, kBallot };
/* Exchange the value `bits` (a scalar of at most 8 bytes) among the lanes
 * of `mask`; returns what this lane gets (by value: no local of the
 * caller has its address taken, which keeps AddressSanitizer's fake stack
 * frames out of every shuffle). */
uint64_t warp_op(int op, unsigned mask, uint64_t bits, int arg, int width,
                 const char *name, const char *file, int line);

/* A scalar's bytes as the unsigned integer of its size, and back. */
template <size_t N>
struct uint_of_size;
template <>
struct uint_of_size<1> { using type = uint8_t; };
template <>
struct uint_of_size<2> { using type = uint16_t; };
template <>
struct uint_of_size<4> { using type = uint32_t; };
template <>
struct uint_of_size<8> { using type = uint64_t; };
template <class T>
inline uint64_t to_bits(T v) {
  return __builtin_bit_cast(typename uint_of_size<sizeof(T)>::type, v);
}
template <class T>
inline T from_bits(uint64_t b) {
  return __builtin_bit_cast(T, (typename uint_of_size<sizeof(T)>::type)b);
}
void syncthreads(const char *file, int line);
/* This block's instance of the static __shared__ variable declared at `key`
 * (a site-unique address): the same address for every thread of the block,
 * fresh (filled with 0xFF bytes) for every block. */
void *shared_static(const void *key, size_t size, size_t align, const char *name,
                    const char *file, int line);
/* The block's dynamic shared memory (the launch's shmem bytes). */
void *shared_dynamic(const char *file, int line);

/* Launch: check the configuration and queue the grid (runtime.cpp).
 * ptr_args[i] is argument i when it is a pointer (checked to be device or
 * pinned memory), else NULL. */
void launch_impl(const char *file, int line, const char *kernel, dim3 grid, dim3 block,
                 size_t shmem, struct CUstream_st *stream, const void *const *ptr_args,
                 int nargs, std::function<void()> body);

template <class T>
inline const void *pointer_arg(const T &v) {
  if constexpr (std::is_pointer<T>::value &&
                !std::is_function<typename std::remove_pointer<T>::type>::value)
    return (const void *)v;
  else
    return nullptr;
}

} // namespace detail

/* kernel<<<grid, block, shmem, stream>>>(args...) as rewritten by
 * tests/cudaemu/rewrite.py: `body` calls the kernel with its arguments (a
 * generic lambda, so template kernels deduce as they would). The arguments
 * are evaluated and copied now, at the launch, as CUDA does; every device
 * thread gets its own copy. */
template <class F, class... A>
inline void launch(const char *file, int line, const char *kernel, dim3 grid, dim3 block,
                   size_t shmem, struct CUstream_st *stream, F body, A... args) {
  const void *ptrs[sizeof...(A) + 1] = {detail::pointer_arg(args)..., nullptr};
  auto tup = std::make_tuple(args...);
  detail::launch_impl(file, line, kernel, grid, block, shmem, stream, ptrs, (int)sizeof...(A),
                      [body, tup]() { std::apply(body, tup); });
}

/* `__shared__ T name;` as rewritten: T is an object or array type. */
template <class T>
inline T &shared(const void *key, const char *name, const char *file, int line) {
  static_assert(std::is_trivially_destructible<T>::value,
                "__shared__ variables cannot have destructors");
  return *static_cast<T *>(detail::shared_static(key, sizeof(T), alignof(T), name, file, line));
}
/* `extern __shared__ T name[];` as rewritten. */
template <class T>
inline T *dynamic_shared(const char *file, int line) {
  return static_cast<T *>(detail::shared_dynamic(file, line));
}

} // namespace cudaemu

/* ---- built-in variables (Programming Guide, "Built-in Variables") -------------- */
#define threadIdx (::cudaemu::detail::current("threadIdx", __FILE__, __LINE__).thread_idx)
#define blockIdx (::cudaemu::detail::current("blockIdx", __FILE__, __LINE__).block_idx)
#define blockDim (::cudaemu::detail::current("blockDim", __FILE__, __LINE__).block_dim)
#define gridDim (::cudaemu::detail::current("gridDim", __FILE__, __LINE__).grid_dim)

/* ---- synchronisation (Programming Guide, "Synchronization Functions") ---------- */
/* Every thread of the block waits here until all have reached it (threads
 * that have exited count as arrived, as on sm_70 and newer). */
inline void __syncthreads(const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::cudaemu::detail::syncthreads(file, line);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const char *file = __builtin_FILE(),
                       int line = __builtin_LINE()) {
  ::cudaemu::detail::warp_op(::cudaemu::detail::kSyncWarp, mask, 0, 0, 32, "__syncwarp", file,
                             line);
}

/* ---- warp shuffle and vote (Programming Guide, "Warp Shuffle Functions",
 * "Warp Vote Functions"): the lanes of `mask` meet; each must name itself in
 * the mask, and every non-exited lane of the mask must call the same
 * intrinsic with the same mask. A value read from a lane that does not take
 * part is undefined: it reads as 0xFF bytes (NaN). */
template <class T>
struct cudaemu_shfl_ok {
  static constexpr bool value = std::is_trivially_copyable<T>::value && sizeof(T) <= 8;
};
template <class T>
inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize,
                     const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
  static_assert(cudaemu_shfl_ok<T>::value, "__shfl_sync: a scalar of at most 8 bytes");
  return ::cudaemu::detail::from_bits<T>(::cudaemu::detail::warp_op(
      ::cudaemu::detail::kShflIdx, mask, ::cudaemu::detail::to_bits(var), srcLane, width,
      "__shfl_sync", file, line));
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned int delta, int width = warpSize,
                        const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
  static_assert(cudaemu_shfl_ok<T>::value, "__shfl_up_sync: a scalar of at most 8 bytes");
  return ::cudaemu::detail::from_bits<T>(::cudaemu::detail::warp_op(
      ::cudaemu::detail::kShflUp, mask, ::cudaemu::detail::to_bits(var), (int)delta, width,
      "__shfl_up_sync", file, line));
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned int delta, int width = warpSize,
                          const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
  static_assert(cudaemu_shfl_ok<T>::value, "__shfl_down_sync: a scalar of at most 8 bytes");
  return ::cudaemu::detail::from_bits<T>(::cudaemu::detail::warp_op(
      ::cudaemu::detail::kShflDown, mask, ::cudaemu::detail::to_bits(var), (int)delta, width,
      "__shfl_down_sync", file, line));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize,
                         const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
  static_assert(cudaemu_shfl_ok<T>::value, "__shfl_xor_sync: a scalar of at most 8 bytes");
  return ::cudaemu::detail::from_bits<T>(::cudaemu::detail::warp_op(
      ::cudaemu::detail::kShflXor, mask, ::cudaemu::detail::to_bits(var), laneMask, width,
      "__shfl_xor_sync", file, line));
}
inline unsigned __ballot_sync(unsigned mask, int predicate, const char *file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  return (unsigned)::cudaemu::detail::warp_op(::cudaemu::detail::kBallot, mask,
                                              predicate != 0, 0, 32,
                                              "__ballot_sync", file, line);
}
inline int __any_sync(unsigned mask, int predicate, const char *file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
  return __ballot_sync(mask, predicate, file, line) != 0;
}
inline int __all_sync(unsigned mask, int predicate, const char *file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
  unsigned v = __ballot_sync(mask, !predicate, file, line);
  return v == 0;
}

/* ---- single-precision intrinsics with explicit rounding (CUDA Math API,
 * "Single Precision Intrinsics"): each operation rounded to nearest even
 * and never contracted into an FMA (the volatile result forbids it whatever
 * -ffp-contract says). ------------------------------------------------------ */
inline float __fadd_rn(float a, float b) {
  volatile float r = a + b;
  return r;
}
inline float __fsub_rn(float a, float b) {
  volatile float r = a - b;
  return r;
}
inline float __fmul_rn(float a, float b) {
  volatile float r = a * b;
  return r;
}
inline float __fdiv_rn(float a, float b) {
  volatile float r = a / b;
  return r;
}
inline float __fsqrt_rn(float a) {
  volatile float r = sqrtf(a);
  return r;
}
inline float __frcp_rn(float a) {
  volatile float r = 1.0f / a;
  return r;
}
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __saturatef(float a) { return a != a ? 0.0f : a < 0.0f ? 0.0f : a > 1.0f ? 1.0f : a; }
template <class T>
inline T __ldg(const T *p) {
  return *p;
}

#endif
