/* cub/device/device_radix_sort.cuh — the emulated device's
 * cub::DeviceRadixSort::SortPairs (CUB's pointer interface), with CUB's
 * documented contract:
 *   - the two-call protocol: d_temp_storage NULL stores the bytes needed in
 *     temp_storage_bytes and does no work; a later call with at least that
 *     many bytes sorts, a call with fewer returns cudaErrorInvalidValue
 *     (CUB's AliasTemporaries refuses too small a temporary);
 *   - stable: pairs with equal keys keep their input order;
 *   - only key bits [begin_bit, end_bit) take part in the comparison;
 *   - asynchronous: the sort is queued on `stream` (cudaemu::enqueue) and
 *     reads and writes device memory when it runs; the temporary storage is
 *     used as the sort's ping-pong buffers, so a caller that lets it overlap
 *     live data sees the damage.
 * Keys must be unsigned integers (CUB's bit twiddling of signed and
 * floating-point keys is not emulated). The work is done by
 * tests/cudaemu/src/radix_sort.cpp. Test code only (tests/cudaemu). */
#ifndef TD_CUDAEMU_CUB_DEVICE_RADIX_SORT_CUH
#define TD_CUDAEMU_CUB_DEVICE_RADIX_SORT_CUH

#include <cuda_runtime.h>
#include <stddef.h>

#include <type_traits>

namespace cudaemu {
namespace detail {
/* keys (n, key_bytes each: 1, 2, 4 or 8), values (n, value_bytes each),
 * sorted by key bits [begin_bit, end_bit); see the file comment. */
cudaError_t radix_sort_pairs(void *d_temp_storage, size_t &temp_storage_bytes,
                             const void *d_keys_in, void *d_keys_out, size_t key_bytes,
                             const void *d_values_in, void *d_values_out, size_t value_bytes,
                             long long num_items, int begin_bit, int end_bit,
                             cudaStream_t stream);
} // namespace detail
} // namespace cudaemu

namespace cub {

struct DeviceRadixSort {
  template <typename KeyT, typename ValueT, typename NumItemsT>
  static cudaError_t SortPairs(void *d_temp_storage, size_t &temp_storage_bytes,
                               const KeyT *d_keys_in, KeyT *d_keys_out,
                               const ValueT *d_values_in, ValueT *d_values_out,
                               NumItemsT num_items, int begin_bit = 0,
                               int end_bit = sizeof(KeyT) * 8, cudaStream_t stream = 0) {
    static_assert(std::is_integral<KeyT>::value && std::is_unsigned<KeyT>::value,
                  "the emulated cub::DeviceRadixSort sorts unsigned integer keys only");
    static_assert(std::is_trivially_copyable<ValueT>::value, "values are copied as bytes");
    return ::cudaemu::detail::radix_sort_pairs(
        d_temp_storage, temp_storage_bytes, d_keys_in, d_keys_out, sizeof(KeyT), d_values_in,
        d_values_out, sizeof(ValueT), (long long)num_items, begin_bit, end_bit, stream);
  }
};

} // namespace cub

#endif
