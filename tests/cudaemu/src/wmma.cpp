/* wmma.cpp — the warp's side of include/mma.h (nvcuda::wmma): where each
 * fragment element lives, the checks of every *_sync call, and the loads,
 * stores and products.
 *
 * Element placement: element i of lane l is entry (i·32 + l)·mul + add
 * (mod rows·cols, a power of two; mul odd, so a bijection) of the tile in
 * row-major order, with mul and add differing between matrix_a, matrix_b
 * and the accumulator: no GPU places elements like this, so kernels that
 * assume a placement fail here, and an element of a does not sit where the
 * same element of c does.
 *
 * Each *_sync call first checks its own lane's arguments (the pointer
 * 256-bit aligned, ldm a multiple of 16 bytes, the whole matrix in device,
 * pinned or the block's shared memory: Programming Guide, "Warp Matrix
 * Functions", and what kernels may address here), then meets the other 31
 * lanes (fiber.cpp's warp_all): every lane of the warp, none exited, the
 * same function at the same call site with the same arguments, else the
 * launch fails naming both lanes' calls. Then each lane moves its own
 * elements. mma_sync meets twice: each lane publishes where its fragments
 * are, reads the others' after the first meeting and writes its own d
 * after the second, when no lane reads c any more (d may be c). */
#include <memory>
#include <mma.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <string>

#include "rt_internal.h"

namespace cudaemu {
namespace detail { /* fiber.cpp */
/* All 32 lanes of the calling warp meet; the call is described by `what`
 * (kept, for messages, until the meeting completes) and identified by
 * `key`: lanes with different keys, or a lane missing, fail the launch. */
void warp_all(uint64_t key, const char *what, const char *file, int line);
/* The launch fails with msg (the kernel, block and thread are prefixed). */
[[noreturn]] void fail_launch(const char *msg);
/* [p, p + bytes) lies in the running block's shared memory. */
bool in_block_shared(const void *p, size_t bytes);
} // namespace detail

namespace wmma_detail {
namespace {

const char *use_name(int use) {
  return use == kMatrixA ? "matrix_a" : use == kMatrixB ? "matrix_b" : "accumulator";
}
const char *elem_name(int elem) {
  return elem == kBf16 ? "__nv_bfloat16" : elem == kTf32 ? "precision::tf32" : "float";
}
size_t elem_bytes(int elem) { return elem == kBf16 ? 2 : 4; }

/* ---- element placement ---------------------------------------------------------------- */
struct Placement {
  uint32_t mask, mul, add, inv; /* entry = (index·mul + add) & mask; index = (entry − add)·inv */
};
Placement placement(int use, int rows, int cols) {
  static const uint32_t muls[3] = {45, 77, 149}, adds[3] = {13, 91, 37};
  Placement p;
  p.mask = (uint32_t)(rows * cols) - 1;
  p.mul = muls[use];
  p.add = adds[use];
  uint32_t x = p.mul; /* the inverse of an odd number mod 2^32: Newton, 3 → 48 bits */
  for (int i = 0; i < 4; i++) x *= 2u - p.mul * x;
  p.inv = x;
  return p;
}
inline uint32_t entry_of(const Placement &p, int lane, int i) {
  return ((uint32_t)(i * 32 + lane) * p.mul + p.add) & p.mask;
}
inline uint32_t index_of(const Placement &p, uint32_t entry) {
  return ((entry - p.add) * p.inv) & p.mask;
}

/* ---- the calling lane ------------------------------------------------------------------- */
struct Lane {
  int warp, lane;
};
Lane lane_of(const char *what, const char *file, int line) {
  const detail::ThreadState &t = detail::current(what, file, line);
  unsigned lin = t.thread_idx.x + t.block_dim.x * (t.thread_idx.y + t.block_dim.y * t.thread_idx.z);
  return Lane{(int)(lin / 32), (int)(lin % 32)};
}

uint64_t mix(uint64_t h, uint64_t v) { /* FNV-1a over v's 8 bytes */
  for (int i = 0; i < 8; i++) h = (h ^ ((v >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  return h;
}
uint64_t mix_str(uint64_t h, const char *s) {
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

/* ---- the checks of one lane's arguments -------------------------------------------------- */
/* The failures, out of line (their message buffers would sit in, and under
 * AddressSanitizer enlarge, every call's frame). */
[[noreturn]] __attribute__((noinline, cold, format(printf, 4, 5))) void refuse(
    const char *what, const char *file, int line, const char *fmt, ...) {
  char why[768], b[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  snprintf(b, sizeof b, "%s at %s:%d: %s (Programming Guide, Warp Matrix Functions)", what, file,
           line, why);
  detail::fail_launch(b);
}

/* What p points into, for a message (the string is gone before the launch
 * fails: nothing on an abandoned fiber stack may own memory). */
__attribute__((noinline, cold)) void describe_into(char *b, size_t n, const void *p) {
  std::string s = describe(p);
  snprintf(b, n, "%s", s.c_str());
}

[[noreturn]] __attribute__((noinline, cold)) void refuse_memory(const char *what, const char *file,
                                                                 int line, int rows, int cols,
                                                                 const void *p, unsigned ldm,
                                                                 size_t bytes, int dev) {
  char d[512];
  describe_into(d, sizeof d, p);
  if (dev == -2)
    refuse(what, file, line,
           "the %dx%d matrix at %p (ldm %u, %zu bytes) does not lie inside one device "
           "allocation: %s", rows, cols, p, ldm, bytes, d);
  refuse(what, file, line,
         "the %dx%d matrix at %p (ldm %u, %zu bytes) is not in device, pinned or this block's "
         "shared memory: %s", rows, cols, p, ldm, bytes, d);
}

/* The matrix at p (rows × cols, `col_major` in memory, ldm elements
 * between rows or columns) may be accessed by the warp. */
void check_matrix(const char *what, int elem, int rows, int cols, const void *p, unsigned ldm,
                  bool col_major, const char *file, int line) {
  size_t es = elem_bytes(elem);
  if ((uintptr_t)p % 32)
    refuse(what, file, line, "the pointer %p is not 256-bit (32-byte) aligned", p);
  if (ldm * es % 16)
    refuse(what, file, line, "ldm %u is not a multiple of %zu elements of %s (16 bytes)", ldm,
           16 / es, elem == kBf16 ? "__nv_bfloat16" : "float");
  int major = col_major ? cols : rows, minor = col_major ? rows : cols;
  size_t bytes = ((size_t)(major - 1) * ldm + (size_t)minor) * es;
  if (detail::in_block_shared(p, bytes)) return;
  int dev = where(p, bytes);
  if (dev >= 0 || (dev == -1 && is_pinned(p, bytes))) return;
  refuse_memory(what, file, line, rows, cols, p, ldm, bytes, dev);
}

/* The key every lane of a load or store must agree on. */
uint64_t call_key(int op, int use, int elem, int rows, int cols, const void *p, unsigned ldm,
                  bool col_major, const char *file, int line) {
  uint64_t h = 0xcbf29ce484222325ull;
  h = mix(h, (uint64_t)op << 48 | (uint64_t)use << 40 | (uint64_t)elem << 32 |
                 (uint64_t)col_major << 31 | (uint64_t)line);
  h = mix(h, (uint64_t)rows << 32 | (uint64_t)cols);
  h = mix(h, (uint64_t)(uintptr_t)p);
  h = mix(h, ldm);
  return mix_str(h, file);
}

/* mma_sync's rendezvous: each lane's fragments, per worker thread (a block
 * runs on one) and warp of the block. On the heap: the module is loaded
 * with dlopen and holds initial-exec TLS (fiber.cpp), so all its TLS comes
 * out of the small static TLS surplus; 24 KiB there fails the dlopen
 * ("cannot allocate memory in static TLS block"). */
struct Frags {
  const void *a, *b;
  const float *c;
};
thread_local std::unique_ptr<Frags[]> t_frags;

inline float input(const void *frag, int elem, int i) {
  if (elem == kBf16) return __bfloat162float(((const __nv_bfloat16 *)frag)[i]);
  float f = ((const float *)frag)[i];
  if (elem == kTf32) { /* the tensor core reads 10 mantissa bits: the low 13 are ignored */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u &= ~0x1fffu;
    memcpy(&f, &u, sizeof f);
  }
  return f;
}

} // namespace

void load(void *x, int use, int elem, int rows, int cols, const void *p, unsigned ldm,
          bool col_major, const char *file, int line) {
  static const char kWhat[] = "wmma::load_matrix_sync";
  Lane me = lane_of(kWhat, file, line);
  check_matrix(kWhat, elem, rows, cols, p, ldm, col_major, file, line);
  char what[192];
  snprintf(what, sizeof what, "%s(%s %dx%d %s, %p, ldm %u, %s)", kWhat, use_name(use), rows,
           cols, elem_name(elem), p, ldm, col_major ? "col_major" : "row_major");
  detail::warp_all(call_key(1, use, elem, rows, cols, p, ldm, col_major, file, line), what, file,
                   line);
  Placement pl = placement(use, rows, cols);
  size_t es = elem_bytes(elem);
  for (int i = 0; i < rows * cols / 32; i++) {
    uint32_t e = entry_of(pl, me.lane, i), r = e / (uint32_t)cols, c = e % (uint32_t)cols;
    size_t off = col_major ? (size_t)c * ldm + r : (size_t)r * ldm + c;
    memcpy((char *)x + i * es, (const char *)p + off * es, es);
  }
}

void store(void *p, const float *x, int rows, int cols, unsigned ldm, bool col_major,
           const char *file, int line) {
  static const char kWhat[] = "wmma::store_matrix_sync";
  Lane me = lane_of(kWhat, file, line);
  check_matrix(kWhat, kFloat, rows, cols, p, ldm, col_major, file, line);
  char what[192];
  snprintf(what, sizeof what, "%s(%p, accumulator %dx%d float, ldm %u, %s)", kWhat, p, rows,
           cols, ldm, col_major ? "mem_col_major" : "mem_row_major");
  detail::warp_all(call_key(2, kAccumulator, kFloat, rows, cols, p, ldm, col_major, file, line),
                   what, file, line);
  Placement pl = placement(kAccumulator, rows, cols);
  for (int i = 0; i < rows * cols / 32; i++) {
    uint32_t e = entry_of(pl, me.lane, i), r = e / (uint32_t)cols, c = e % (uint32_t)cols;
    ((float *)p)[col_major ? (size_t)c * ldm + r : (size_t)r * ldm + c] = x[i];
  }
}

void mma(float *d, const void *a, const void *b, const float *c, int elem, int m, int n, int k,
         bool a_col, bool b_col, const char *file, int line) {
  static const char kWhat[] = "wmma::mma_sync";
  Lane me = lane_of(kWhat, file, line);
  char what[192];
  snprintf(what, sizeof what, "%s(m%dn%dk%d %s, a %s, b %s)", kWhat, m, n, k, elem_name(elem),
           a_col ? "col_major" : "row_major", b_col ? "col_major" : "row_major");
  uint64_t key = call_key(3, (int)a_col << 1 | (int)b_col, elem, m * 64 + n, k, nullptr, 0, false,
                          file, line);
  if (!t_frags) t_frags.reset(new Frags[32 * 32]());
  Frags *warp = &t_frags[(size_t)me.warp * 32];
  warp[me.lane] = Frags{a, b, c};
  detail::warp_all(key, what, file, line);
  Placement pa = placement(kMatrixA, m, k), pb = placement(kMatrixB, k, n),
            pc = placement(kAccumulator, m, n);
  float out[32]; /* m·n/32 ≤ 8 */
  for (int i = 0; i < m * n / 32; i++) {
    uint32_t e = entry_of(pc, me.lane, i), r = e / (uint32_t)n, col = e % (uint32_t)n;
    float acc = c[i];
    for (int kk = 0; kk < k; kk++) {
      uint32_t ia = index_of(pa, r * (uint32_t)k + (uint32_t)kk);
      uint32_t ib = index_of(pb, (uint32_t)kk * (uint32_t)n + col);
      acc += input(warp[ia % 32].a, elem, (int)(ia / 32)) * input(warp[ib % 32].b, elem, (int)(ib / 32));
    }
    out[i] = acc;
  }
  detail::warp_all(key, what, file, line); /* every lane has read the others' a, b and c */
  for (int i = 0; i < m * n / 32; i++) d[i] = out[i];
}

} // namespace wmma_detail
} // namespace cudaemu
