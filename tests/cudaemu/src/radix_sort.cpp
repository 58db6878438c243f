/* radix_sort.cpp — the work behind the emulated cub::DeviceRadixSort::
 * SortPairs (include/cub/device/device_radix_sort.cuh): a stable
 * least-significant-digit radix sort of (key, value) pairs on key bits
 * [begin_bit, end_bit), 8 bits a pass, queued on the caller's stream.
 *
 * Temporary storage (CUB's two-call protocol): the keys and values
 * alternate between the output arrays and two arrays in the temporary
 * storage, so the storage is really used while the sort runs. Its size is
 * n keys + n values (each rounded to 256 bytes) + 256 bytes; a smaller
 * temp_storage_bytes is refused with cudaErrorInvalidValue, as CUB refuses
 * it. Test code only (tests/cudaemu). */
#include <cub/device/device_radix_sort.cuh>
#include <string.h>

#include <vector>

#include "rt_internal.h"

namespace cudaemu {
namespace detail {
namespace {

size_t align256(size_t v) { return (v + 255) / 256 * 256; }

uint64_t load_key(const unsigned char *p, size_t kb) {
  switch (kb) {
  case 1: return *p;
  case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
  case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
  default: { uint64_t v; memcpy(&v, p, 8); return v; }
  }
}

/* Each pass moves (key, value) pairs from (ks, vs) to (kd, vd), stably by
 * the digit at `shift`. */
void pass(const unsigned char *ks, const unsigned char *vs, unsigned char *kd, unsigned char *vd,
          size_t kb, size_t vb, size_t n, int shift, int bits) {
  uint64_t mask = (bits >= 64 ? ~0ull : ((1ull << bits) - 1));
  std::vector<size_t> count((size_t)1 << bits, 0);
  for (size_t i = 0; i < n; i++) count[(size_t)((load_key(ks + i * kb, kb) >> shift) & mask)]++;
  size_t sum = 0;
  for (size_t &c : count) {
    size_t t = c;
    c = sum;
    sum += t;
  }
  for (size_t i = 0; i < n; i++) {
    size_t d = count[(size_t)((load_key(ks + i * kb, kb) >> shift) & mask)]++;
    memcpy(kd + d * kb, ks + i * kb, kb);
    memcpy(vd + d * vb, vs + i * vb, vb);
  }
}

} // namespace

cudaError_t radix_sort_pairs(void *d_temp_storage, size_t &temp_storage_bytes,
                             const void *d_keys_in, void *d_keys_out, size_t key_bytes,
                             const void *d_values_in, void *d_values_out, size_t value_bytes,
                             long long num_items, int begin_bit, int end_bit,
                             cudaStream_t stream) {
  if (num_items < 0 || (key_bytes != 1 && key_bytes != 2 && key_bytes != 4 && key_bytes != 8)) {
    report("cub::DeviceRadixSort::SortPairs: %lld items of %zu-byte keys", num_items, key_bytes);
    return cudaErrorInvalidValue;
  }
  size_t n = (size_t)num_items;
  size_t need = align256(n * key_bytes) + align256(n * value_bytes) + 256;
  if (!d_temp_storage) { /* the size query: no work */
    temp_storage_bytes = need;
    return cudaSuccess;
  }
  if (temp_storage_bytes < need) {
    report("cub::DeviceRadixSort::SortPairs: temp_storage_bytes %zu, less than the %zu bytes the "
           "size query gave: refused (cudaErrorInvalidValue)",
           temp_storage_bytes, need);
    return cudaErrorInvalidValue;
  }
  if (begin_bit < 0 || end_bit > (int)(8 * key_bytes) || (begin_bit > end_bit)) {
    report("cub::DeviceRadixSort::SortPairs: bits [%d, %d) of %zu-bit keys", begin_bit, end_bit,
           8 * key_bytes);
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  /* every array must be device memory (a GPU would fault on anything else) */
  struct {
    const void *p;
    size_t bytes;
    const char *what;
  } arrays[] = {{d_temp_storage, need, "d_temp_storage"},
                {d_keys_in, n * key_bytes, "d_keys_in"},
                {d_keys_out, n * key_bytes, "d_keys_out"},
                {d_values_in, n * value_bytes, "d_values_in"},
                {d_values_out, n * value_bytes, "d_values_out"}};
  for (auto &a : arrays)
    if (where(a.p, a.bytes) < 0) {
      report("cub::DeviceRadixSort::SortPairs: %s [%p, +%zu bytes) is not device memory (%s)",
             a.what, a.p, a.bytes, describe(a.p).c_str());
      return cudaErrorInvalidValue;
    }
  unsigned char *tk = (unsigned char *)d_temp_storage;
  unsigned char *tv = tk + align256(n * key_bytes);
  const unsigned char *ki = (const unsigned char *)d_keys_in;
  const unsigned char *vi = (const unsigned char *)d_values_in;
  unsigned char *ko = (unsigned char *)d_keys_out, *vo = (unsigned char *)d_values_out;
  size_t kb = key_bytes, vb = value_bytes;
  return enqueue(
      stream,
      [=]() {
        int passes = (end_bit - begin_bit + 7) / 8;
        /* the passes alternate so that the last one writes the output */
        const unsigned char *sk = ki, *sv = vi;
        for (int p = 0; p < passes; p++) {
          bool to_out = (passes - 1 - p) % 2 == 0;
          unsigned char *dk = to_out ? ko : tk, *dv = to_out ? vo : tv;
          int shift = begin_bit + 8 * p, bits = end_bit - shift < 8 ? end_bit - shift : 8;
          pass(sk, sv, dk, dv, kb, vb, n, shift, bits);
          sk = dk;
          sv = dv;
        }
        if (passes == 0) { /* no bits: the order stays */
          memmove(ko, ki, n * kb);
          memmove(vo, vi, n * vb);
        }
        return cudaSuccess;
      },
      "cub::DeviceRadixSort::SortPairs");
}

} // namespace detail
} // namespace cudaemu
