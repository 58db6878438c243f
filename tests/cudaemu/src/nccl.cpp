/* nccl.cpp — the emulated device's NCCL (include/nccl.h): communicators and
 * collectives between the processes (MPI ranks) of one machine, over POSIX
 * shared memory. Test code only (tests/cudaemu), never part of a real build;
 * it does not use MPI (the module must not depend on MPI's thread level).
 *
 * Transport. ncclGetUniqueId fills the id with random bytes behind a magic;
 * the id names one shared-memory segment ("/tdnccl-<hex>"). Every rank of
 * ncclCommInitRank opens (creating if first) and maps it, claims its rank
 * slot, records (node name, current device) and waits until all nranks
 * have joined — at most TD_CUDAEMU_NCCL_TIMEOUT_S seconds (default 60),
 * then it fails (ncclSystemError) instead of hanging. The segment holds a
 * header (ranks' records, one generation counter per rank, failure flags)
 * and one chunk buffer per rank (TD_CUDAEMU_NCCL_CHUNK_BYTES, default
 * 1 MiB); the name is unlinked once everyone has mapped it.
 *
 * A collective is validated on the calling thread (pointers located with
 * cudaemu::where, never read there) and queued on the stream with
 * cudaemu::enqueue; on the stream's worker it runs in chunks: each rank
 * copies its part of the chunk into its own buffer, meets the others at a
 * barrier (each rank publishes its generation; waiting is a spin with
 * sched_yield then short sleeps, checking the failure flags and
 * TD_CUDAEMU_NCCL_COLL_TIMEOUT_S, default 600 s), reads what it needs from
 * every buffer, and meets them again before the buffers are reused.
 * Reductions go over ranks 0, 1, ..., n−1 in that order, in float for
 * float and bf16 (bf16 rounded once, to nearest even), so every rank gets
 * the same bits every run. At an operation's first barrier the ranks also
 * compare what they were asked (call, count, type, op, root): a mismatch is
 * an error on every rank, not a silent hang or garbage.
 *
 * Errors of queued work are asynchronous, as in NCCL: the communicator's
 * error (ncclCommGetAsyncError) is set, later operations on it fail, the
 * CUDA stream itself is not poisoned. ncclCommAbort marks the segment
 * broken, so peers blocked on this rank see ncclRemoteError at once.
 * Group calls (NCCL docs, "Group Calls"): between ncclGroupStart and
 * ncclGroupEnd operations are checked and held; ncclGroupEnd issues them
 * together, one queued job per (communicator, stream), in call order.
 *
 * Point-to-point (ncclSend/ncclRecv, NCCL docs "Point-to-point
 * communication"): every ordered pair of ranks (a → b) has a channel in the
 * segment: a chunk buffer (TD_CUDAEMU_NCCL_P2P_CHUNK_BYTES, default 64 KiB)
 * and counters of receives posted, chunks written and chunks taken. The
 * i-th send from a to b matches b's i-th receive from a; the sender checks
 * count and type against the receive's. Strict rendezvous, the most a real
 * NCCL may ask: a send writes nothing before its receive is posted and
 * completes only when the receiver has taken its last chunk — so a send
 * blocks its stream until the peer's receive runs, and code that would
 * deadlock on some NCCL deadlocks here (until the timeout names it). The
 * sends and receives of one group progress together; those on one channel
 * in call order. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nccl.h> /* after the C++ library: the emulated runtime defines __noinline__ */

#include "emu_internal.h"

namespace {

const uint32_t kIdMagic = 0x54444e43u;   /* "TDNC" */
const uint32_t kCommMagic = 0x436f6d6du; /* "Comm" */
const int kMaxRanks = 256;                /* emulation limit on a communicator's size */

enum Why { WHY_NONE = 0, WHY_ABORT = 1, WHY_TIMEOUT = 2, WHY_MISMATCH = 3, WHY_INIT = 4 };

struct RankInfo {
  std::atomic<int32_t> present;
  int32_t device;
  char host[64];
};

/* What a rank was asked to do, compared at an operation's first barrier. */
struct OpSig {
  int32_t kind, type, red, root;
  uint64_t count;
};

struct Header {
  std::atomic<int32_t> nranks; /* set by the first joiner (0: none yet) */
  std::atomic<int32_t> joined;
  std::atomic<int32_t> broken;     /* 0, or 1 + the rank that broke the communicator */
  std::atomic<int32_t> broken_why; /* enum Why */
  std::atomic<uint64_t> chunk;     /* bytes per rank buffer, set by the first joiner */
  RankInfo ranks[kMaxRanks];
  std::atomic<uint64_t> arrive[kMaxRanks]; /* barrier generation each rank reached */
  std::atomic<int32_t> left[kMaxRanks];    /* the rank destroyed its communicator */
  OpSig sig[kMaxRanks];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");

/* One point-to-point channel (a → b), in the segment after the collective
 * buffers: counters only the two ends touch. */
struct Chan {
  std::atomic<uint64_t> posted; /* receives b has posted from a */
  std::atomic<uint64_t> wrote;  /* chunks a has written (all messages) */
  std::atomic<uint64_t> taken;  /* chunks b has taken */
  std::atomic<uint64_t> rcount; /* the last posted receive's count and type */
  std::atomic<int32_t> rtype;
  char pad[64 - 4 * 8 - 4];
};
static_assert(sizeof(Chan) == 64, "a channel is one cache line");

const size_t kHeaderBytes = (sizeof(Header) + 4095) & ~(size_t)4095;

/* ---- last error (ncclGetLastError) and the debug print ------------------- */
std::mutex g_err_mu;
char g_last_error[1024];

ncclResult_t fail(ncclResult_t r, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  {
    std::lock_guard<std::mutex> l(g_err_mu);
    snprintf(g_last_error, sizeof g_last_error, "%s", msg);
  }
  if (getenv("NCCL_DEBUG")) fprintf(stderr, "cudaemu NCCL WARN %s\n", msg);
  return r;
}

double env_seconds(const char *name, double dflt) {
  const char *e = getenv(name);
  if (!e || !*e) return dflt;
  char *end = nullptr;
  double v = strtod(e, &end);
  return end && end != e && v > 0 ? v : dflt;
}

uint64_t p2p_chunk_bytes() {
  const char *e = getenv("TD_CUDAEMU_NCCL_P2P_CHUNK_BYTES");
  uint64_t v = e && *e ? strtoull(e, nullptr, 10) : 0;
  if (v == 0) v = 64u << 10;
  v = std::max<uint64_t>(v, 64);
  return (v + 63) & ~(uint64_t)63;
}

uint64_t chunk_bytes() {
  const char *e = getenv("TD_CUDAEMU_NCCL_CHUNK_BYTES");
  uint64_t v = e && *e ? strtoull(e, nullptr, 10) : 0;
  if (v == 0) v = 1u << 20;
  v = std::max<uint64_t>(v, 64);
  return (v + 63) & ~(uint64_t)63;
}

double now_s() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Waiting politely: yield first, then sleep a little longer each time. */
void backoff(int &spins) {
  if (++spins < 200) {
    sched_yield();
    return;
  }
  struct timespec ts = {0, std::min(spins - 199, 50) * 20000L}; /* 20 µs .. 1 ms */
  nanosleep(&ts, nullptr);
}

size_t type_size(int t) {
  switch (t) {
  case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
  case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  default: return 0;
  }
}

const char *kind_name(int k);

/* ---- a communicator ------------------------------------------------------ */
struct Impl {
  int rank = 0, nranks = 0, device = 0;
  std::string name;
  Header *h = nullptr;
  char *data = nullptr;
  size_t map_bytes = 0;
  uint64_t chunk = 0;
  double coll_timeout = 600;
  uint64_t gen = 0;   /* barriers passed; only the job holding op_mu touches it */
  std::mutex op_mu;   /* one operation at a time per communicator */
  std::atomic<int> async{ncclSuccess};
  std::atomic<bool> local_abort{false};
  std::atomic<int> inflight{0}; /* queued jobs not yet finished */
  ~Impl() {
    if (h) munmap(h, map_bytes);
  }
  char *slot(int q) { return data + (size_t)q * chunk; }
  /* point-to-point: channels (nranks², from → to) and their buffers */
  Chan *chans = nullptr;
  char *pdata = nullptr;
  uint64_t pchunk = 0;
  std::vector<uint64_t> nsent; /* sends issued to each peer (only the job holding op_mu) */
  Chan &chan(int from, int to) { return chans[(size_t)from * (size_t)nranks + (size_t)to]; }
  char *pbuf(int from, int to) {
    return pdata + ((size_t)from * (size_t)nranks + (size_t)to) * pchunk;
  }
};

} // namespace

struct ncclComm {
  uint32_t magic;
  std::shared_ptr<Impl> impl;
};

namespace {

Impl *I(ncclComm_t c) { return c && c->magic == kCommMagic ? c->impl.get() : nullptr; }

void set_async(Impl &c, ncclResult_t r) {
  int expect = ncclSuccess;
  c.async.compare_exchange_strong(expect, (int)r);
}

void mark_broken(Impl &c, Why why) {
  int32_t expect = 0;
  if (c.h->broken.compare_exchange_strong(expect, c.rank + 1)) c.h->broken_why.store(why);
}

const char *why_text(int w) {
  switch (w) {
  case WHY_ABORT: return "aborted the communicator (ncclCommAbort)";
  case WHY_TIMEOUT: return "timed out waiting for a peer";
  case WHY_MISMATCH: return "found the ranks disagreeing on an operation";
  default: return "failed";
  }
}

/* Meet every rank at the next generation. */
ncclResult_t barrier(Impl &c, const char *what) {
  uint64_t g = ++c.gen;
  c.h->arrive[c.rank].store(g, std::memory_order_release);
  double t0 = now_s();
  for (int q = 0; q < c.nranks; q++) {
    int spins = 0;
    while (c.h->arrive[q].load(std::memory_order_acquire) < g) {
      int32_t b = c.h->broken.load();
      if (c.local_abort.load()) return fail(ncclInvalidUsage, "%s: communicator aborted", what);
      if (b)
        return fail(ncclRemoteError, "%s: rank %d %s", what, b - 1,
                    why_text(c.h->broken_why.load()));
      if (c.h->left[q].load())
        return fail(ncclRemoteError, "%s: rank %d destroyed its communicator while rank %d "
                                     "waited for it (the ranks did not issue the same calls)",
                    what, q, c.rank);
      if (now_s() - t0 > c.coll_timeout) {
        mark_broken(c, WHY_TIMEOUT);
        return fail(ncclSystemError,
                    "%s: rank %d waited %.0f s for rank %d (TD_CUDAEMU_NCCL_COLL_TIMEOUT_S)",
                    what, c.rank, c.coll_timeout, q);
      }
      backoff(spins);
    }
  }
  return ncclSuccess;
}

/* ---- element types and reductions ----------------------------------------- */
template <typename T>
struct Plain {
  typedef T A;
  static A ld(const char *p, size_t i) {
    T v;
    memcpy(&v, p + i * sizeof(T), sizeof(T));
    return v;
  }
  static void st(char *p, size_t i, A v) { memcpy(p + i * sizeof(T), &v, sizeof(T)); }
};

struct Bf16 {
  typedef float A;
  static A ld(const char *p, size_t i) {
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    uint32_t u = (uint32_t)h << 16;
    float v;
    memcpy(&v, &u, 4);
    return v;
  }
  static void st(char *p, size_t i, A v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    uint16_t h;
    if ((u & 0x7fffffffu) > 0x7f800000u)
      h = (uint16_t)((u >> 16) | 0x40u);
    else
      h = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    memcpy(p + 2 * i, &h, 2);
  }
};

template <class C>
void reduce_t(char *dst, const char *const *src, int n, size_t cnt, int op) {
  typedef typename C::A A;
  for (size_t i = 0; i < cnt; i++) {
    A acc = C::ld(src[0], i);
    for (int q = 1; q < n; q++) {
      A v = C::ld(src[q], i);
      switch (op) {
      case ncclSum: case ncclAvg: acc = acc + v; break;
      case ncclProd: acc = acc * v; break;
      case ncclMax: acc = (v > acc || v != v) ? v : acc; break; /* NaN wins */
      default: acc = (v < acc || v != v) ? v : acc; break;
      }
    }
    if (op == ncclAvg) acc = (A)(acc / (A)n);
    C::st(dst, i, acc);
  }
}

/* dst[i] = src[0][i] ∘ src[1][i] ∘ ... (ranks in order). */
void reduce(char *dst, const char *const *src, int n, size_t cnt, int type, int op) {
  switch (type) {
  case ncclInt8: reduce_t<Plain<int8_t>>(dst, src, n, cnt, op); break;
  case ncclUint8: reduce_t<Plain<uint8_t>>(dst, src, n, cnt, op); break;
  case ncclInt32: reduce_t<Plain<int32_t>>(dst, src, n, cnt, op); break;
  case ncclUint32: reduce_t<Plain<uint32_t>>(dst, src, n, cnt, op); break;
  case ncclInt64: reduce_t<Plain<int64_t>>(dst, src, n, cnt, op); break;
  case ncclUint64: reduce_t<Plain<uint64_t>>(dst, src, n, cnt, op); break;
  case ncclFloat32: reduce_t<Plain<float>>(dst, src, n, cnt, op); break;
  case ncclFloat64: reduce_t<Plain<double>>(dst, src, n, cnt, op); break;
  case ncclBfloat16: reduce_t<Bf16>(dst, src, n, cnt, op); break;
  default: break; /* refused at the call */
  }
}

/* ---- operations -------------------------------------------------------------- */
enum Kind { K_ALLREDUCE, K_REDUCE, K_BROADCAST, K_REDUCESCATTER, K_ALLGATHER, K_SEND, K_RECV };

const char *kind_name(int k) {
  switch (k) {
  case K_ALLREDUCE: return "ncclAllReduce";
  case K_REDUCE: return "ncclReduce";
  case K_BROADCAST: return "ncclBroadcast";
  case K_REDUCESCATTER: return "ncclReduceScatter";
  case K_SEND: return "ncclSend";
  case K_RECV: return "ncclRecv";
  default: return "ncclAllGather";
  }
}

struct Op {
  int kind;
  const char *send;
  char *recv;
  size_t count; /* AllReduce/Reduce/Broadcast: count; ReduceScatter: recvcount; AllGather:
                   sendcount */
  int type, red, root; /* root: the peer of a send or receive */
};

/* Publish this rank's signature, meet, compare everyone's. */
ncclResult_t first_barrier(Impl &c, const Op &o) {
  ncclResult_t r = barrier(c, kind_name(o.kind));
  if (r != ncclSuccess) return r;
  for (int q = 0; q < c.nranks; q++) {
    const OpSig &a = c.h->sig[0], &b = c.h->sig[q];
    if (a.kind != b.kind || a.type != b.type || a.red != b.red || a.root != b.root ||
        a.count != b.count) {
      mark_broken(c, WHY_MISMATCH);
      return fail(ncclInvalidUsage,
                  "operation mismatch: rank 0 called %s (count %llu, type %d, op %d, root %d), "
                  "rank %d called %s (count %llu, type %d, op %d, root %d)",
                  kind_name(a.kind), (unsigned long long)a.count, a.type, a.red, a.root, q,
                  kind_name(b.kind), (unsigned long long)b.count, b.type, b.red, b.root);
    }
  }
  return ncclSuccess;
}

#define TRY(x)                                                                         \
  do {                                                                                 \
    ncclResult_t r__ = (x);                                                            \
    if (r__ != ncclSuccess) return r__;                                                \
  } while (0)

ncclResult_t run_op(Impl &c, const Op &o) {
  const size_t es = type_size(o.type);
  const int n = c.nranks, me = c.rank;
  const char *name = kind_name(o.kind);
  OpSig s = {o.kind, o.type, o.red, o.root, (uint64_t)o.count};
  c.h->sig[me] = s;
  std::vector<const char *> src((size_t)n);
  /* per-chunk elements: one chunk per rank buffer, or one piece per
   * destination rank in it (reduce-scatter) */
  const size_t per = o.kind == K_REDUCESCATTER ? c.chunk / (es * (size_t)n) : c.chunk / es;
  if (per == 0)
    return fail(ncclInternalError, "%s: TD_CUDAEMU_NCCL_CHUNK_BYTES %llu too small for %d ranks",
                name, (unsigned long long)c.chunk, n);
  bool first = true;
  for (size_t off = 0; off < o.count; off += per) {
    const size_t m = std::min(per, o.count - off);
    switch (o.kind) {
    case K_ALLREDUCE:
    case K_REDUCE:
      memcpy(c.slot(me), o.send + off * es, m * es);
      break;
    case K_BROADCAST:
      if (me == o.root) memcpy(c.slot(me), o.send + off * es, m * es);
      break;
    case K_REDUCESCATTER:
      for (int t = 0; t < n; t++)
        memcpy(c.slot(me) + (size_t)t * per * es, o.send + ((size_t)t * o.count + off) * es,
               m * es);
      break;
    default: /* K_ALLGATHER */
      memcpy(c.slot(me), o.send + off * es, m * es);
      break;
    }
    TRY(first ? first_barrier(c, o) : barrier(c, name));
    first = false;
    switch (o.kind) {
    case K_ALLREDUCE:
    case K_REDUCE:
      if (o.kind == K_ALLREDUCE || me == o.root) {
        for (int q = 0; q < n; q++) src[(size_t)q] = c.slot(q);
        reduce(o.recv + off * es, src.data(), n, m, o.type, o.red);
      }
      break;
    case K_BROADCAST:
      memcpy(o.recv + off * es, c.slot(o.root), m * es);
      break;
    case K_REDUCESCATTER:
      for (int q = 0; q < n; q++) src[(size_t)q] = c.slot(q) + (size_t)me * per * es;
      reduce(o.recv + off * es, src.data(), n, m, o.type, o.red);
      break;
    default:
      for (int q = 0; q < n; q++)
        memcpy(o.recv + ((size_t)q * o.count + off) * es, c.slot(q), m * es);
      break;
    }
    TRY(barrier(c, name));
  }
  return ncclSuccess;
}

/* ---- point-to-point ------------------------------------------------------------ */
struct P2p {
  const Op *o;
  uint64_t msg = 0;       /* send: this message's number on its channel */
  uint64_t first = 0;     /* the channel's chunk counter at this message's first chunk */
  uint64_t chunks = 0, moved = 0;
  bool posted = false, done = false;
};

/* One step of p: post, move a chunk, or finish; true when it did something. */
ncclResult_t p2p_step(Impl &c, P2p &p, bool *acted) {
  const Op &o = *p.o;
  const size_t es = type_size(o.type), bytes = o.count * es;
  *acted = false;
  if (o.kind == K_RECV) {
    Chan &ch = c.chan(o.root, c.rank);
    if (!p.posted) { /* name it, then count it: the sender reads the name after the count */
      p.first = ch.taken.load(std::memory_order_acquire);
      p.chunks = (bytes + c.pchunk - 1) / c.pchunk;
      ch.rcount.store(o.count, std::memory_order_relaxed);
      ch.rtype.store(o.type, std::memory_order_relaxed);
      ch.posted.fetch_add(1, std::memory_order_release);
      p.posted = *acted = true;
      return ncclSuccess;
    }
    if (ch.wrote.load(std::memory_order_acquire) > p.first + p.moved) {
      size_t off = (size_t)(p.moved * c.pchunk), m = std::min<size_t>(c.pchunk, bytes - off);
      memcpy(o.recv + off, c.pbuf(o.root, c.rank), m);
      ch.taken.fetch_add(1, std::memory_order_release);
      p.done = ++p.moved == p.chunks;
      *acted = true;
    }
    return ncclSuccess;
  }
  Chan &ch = c.chan(c.rank, o.root);
  if (!p.posted) { /* wait for the matching receive */
    if (ch.posted.load(std::memory_order_acquire) <= p.msg) return ncclSuccess;
    uint64_t rc = ch.rcount.load(std::memory_order_relaxed);
    int32_t rt = ch.rtype.load(std::memory_order_relaxed);
    if (rc != o.count || rt != o.type) {
      mark_broken(c, WHY_MISMATCH);
      return fail(ncclInvalidUsage,
                  "ncclSend: rank %d sends message %llu to rank %d with count %zu type %d, "
                  "which receives it with count %llu type %d",
                  c.rank, (unsigned long long)p.msg, o.root, o.count, o.type,
                  (unsigned long long)rc, rt);
    }
    p.first = ch.wrote.load(std::memory_order_relaxed);
    p.chunks = (bytes + c.pchunk - 1) / c.pchunk;
    p.posted = *acted = true;
    return ncclSuccess;
  }
  uint64_t w = ch.wrote.load(std::memory_order_relaxed), t = ch.taken.load(std::memory_order_acquire);
  if (p.moved < p.chunks && w == t) { /* the buffer is free: the next chunk */
    size_t off = (size_t)(p.moved * c.pchunk), m = std::min<size_t>(c.pchunk, bytes - off);
    memcpy(c.pbuf(c.rank, o.root), o.send + off, m);
    ch.wrote.fetch_add(1, std::memory_order_release);
    p.moved++;
    *acted = true;
  } else if (p.moved == p.chunks && t >= p.first + p.chunks) { /* all taken: complete */
    p.done = *acted = true;
  }
  return ncclSuccess;
}

/* The sends and receives ops[from, to) of one job, progressing together;
 * on one channel in call order. */
ncclResult_t run_p2p(Impl &c, const std::vector<Op> &ops, size_t from, size_t to) {
  std::vector<P2p> ps(to - from);
  for (size_t i = from; i < to; i++) {
    ps[i - from].o = &ops[i];
    if (ops[i].kind == K_SEND) ps[i - from].msg = c.nsent[(size_t)ops[i].root]++;
  }
  double t0 = now_s();
  int spins = 0;
  for (size_t left = ps.size(); left > 0;) {
    bool any = false;
    for (size_t i = 0; i < ps.size(); i++) {
      if (ps[i].done) continue;
      bool earlier = false; /* an earlier unfinished op on the same channel goes first */
      for (size_t j = 0; j < i && !earlier; j++)
        earlier = !ps[j].done && ps[j].o->kind == ps[i].o->kind && ps[j].o->root == ps[i].o->root;
      if (earlier) continue;
      bool acted = false;
      TRY(p2p_step(c, ps[i], &acted));
      if (ps[i].done) left--;
      any = any || acted;
    }
    if (any) {
      spins = 0;
      t0 = now_s();
      continue;
    }
    int32_t b = c.h->broken.load();
    if (c.local_abort.load()) return fail(ncclInvalidUsage, "ncclSend/ncclRecv: communicator aborted");
    if (b)
      return fail(ncclRemoteError, "ncclSend/ncclRecv: rank %d %s", b - 1,
                  why_text(c.h->broken_why.load()));
    for (const P2p &p : ps)
      if (!p.done && c.h->left[p.o->root].load())
        return fail(ncclRemoteError, "%s: rank %d destroyed its communicator while rank %d "
                    "waited for it", kind_name(p.o->kind), p.o->root, c.rank);
    if (now_s() - t0 > c.coll_timeout) {
      mark_broken(c, WHY_TIMEOUT);
      for (const P2p &p : ps)
        if (!p.done) {
          Chan &ch = p.o->kind == K_SEND ? c.chan(c.rank, p.o->root) : c.chan(p.o->root, c.rank);
          return fail(ncclSystemError, "%s: rank %d waited %.0f s for rank %d (%s; message %llu, "
                      "chunk %llu of %llu; the channel: %llu receives posted, %llu chunks "
                      "written, %llu taken; TD_CUDAEMU_NCCL_COLL_TIMEOUT_S)",
                      kind_name(p.o->kind), c.rank, c.coll_timeout, p.o->root,
                      p.o->kind == K_SEND ? "its receive was not posted or not taken"
                                          : "its send did not come",
                      (unsigned long long)p.msg, (unsigned long long)p.moved,
                      (unsigned long long)p.chunks, (unsigned long long)ch.posted.load(),
                      (unsigned long long)ch.wrote.load(), (unsigned long long)ch.taken.load());
        }
    }
    backoff(spins);
  }
  return ncclSuccess;
}

/* A queued job: the operations of one call or one group on one stream. */
void run_ops(Impl &c, const std::vector<Op> &ops) {
  std::lock_guard<std::mutex> l(c.op_mu);
  for (size_t i = 0; i < ops.size(); i++) {
    const Op &o = ops[i];
    if (o.kind == K_SEND || o.kind == K_RECV) { /* a run of them progresses together */
      size_t j = i;
      while (j < ops.size() && (ops[j].kind == K_SEND || ops[j].kind == K_RECV)) j++;
      if (c.async.load() != ncclSuccess) break;
      ncclResult_t r = run_p2p(c, ops, i, j);
      if (r != ncclSuccess) {
        set_async(c, r);
        break;
      }
      i = j - 1;
      continue;
    }
    if (c.async.load() != ncclSuccess) break;
    if (c.local_abort.load()) {
      set_async(c, fail(ncclInvalidUsage, "%s: communicator aborted", kind_name(o.kind)));
      break;
    }
    if (int32_t b = c.h->broken.load()) {
      set_async(c, fail(ncclRemoteError, "%s: rank %d %s", kind_name(o.kind), b - 1,
                        why_text(c.h->broken_why.load())));
      break;
    }
    ncclResult_t r = run_op(c, o);
    if (r != ncclSuccess) {
      set_async(c, r);
      break;
    }
  }
}

void submit(const std::shared_ptr<Impl> &impl, cudaStream_t stream, std::vector<Op> ops,
            ncclResult_t *err) {
  impl->inflight.fetch_add(1);
  std::shared_ptr<Impl> keep = impl;
  cudaError_t e = cudaemu::enqueue(
      stream,
      [keep, ops]() {
        run_ops(*keep, ops);
        keep->inflight.fetch_sub(1);
        return cudaSuccess;
      },
      kind_name(ops[0].kind));
  if (e != cudaSuccess) {
    impl->inflight.fetch_sub(1);
    *err = fail(ncclUnhandledCudaError, "%s: the stream refused the work: %s",
                kind_name(ops[0].kind), cudaGetErrorString(e));
  }
}

/* ---- groups (thread-local, as NCCL's) -------------------------------------- */
struct Pending {
  std::shared_ptr<Impl> impl;
  cudaStream_t stream;
  Op op;
};
thread_local int t_depth = 0;
thread_local std::vector<Pending> t_pending;
thread_local ncclResult_t t_group_err = ncclSuccess;

/* ---- argument checks ------------------------------------------------------- */
ncclResult_t check_buf(const Impl &c, const char *op, const char *what, const void *p,
                       size_t bytes) {
  if (bytes == 0) return ncclSuccess;
  if (!p) return fail(ncclInvalidArgument, "%s : %s is NULL", op, what);
  int w = cudaemu::where(p, bytes);
  if (w == -1)
    return fail(ncclInvalidArgument, "%s : %s %p is not a valid device pointer", op, what, p);
  if (w == -2)
    return fail(ncclInvalidArgument,
                "%s : %s %p + %zu bytes runs past its device allocation (or was freed)", op,
                what, p, bytes);
  if (w != c.device)
    return fail(ncclInvalidArgument, "%s : %s allocated on device %d mismatches with NCCL "
                                     "device %d",
                op, what, w, c.device);
  return ncclSuccess;
}

bool overlap(const void *a, size_t an, const void *b, size_t bn) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return an && bn && x < y + bn && y < x + an;
}

/* Check one call and issue it (or hold it, inside a group). */
ncclResult_t issue(ncclComm_t comm, cudaStream_t stream, Op o) {
  const char *name = kind_name(o.kind);
  ncclResult_t r = ncclSuccess;
  Impl *c = I(comm);
  if (!c) {
    r = fail(ncclInvalidArgument, "%s : comm is NULL or not a communicator", name);
    goto done;
  }
  if (c->local_abort.load()) {
    r = fail(ncclInvalidUsage, "%s : the communicator was aborted", name);
    goto done;
  }
  if (c->async.load() != ncclSuccess) {
    r = fail((ncclResult_t)c->async.load(), "%s : the communicator has an asynchronous error",
             name);
    goto done;
  }
  if (o.type < 0 || o.type >= ncclNumTypes) {
    r = fail(ncclInvalidArgument, "%s : invalid type %d", name, o.type);
    goto done;
  }
  if (o.type == ncclFloat16 || o.type == ncclFloat8e4m3 || o.type == ncclFloat8e5m2) {
    r = fail(ncclInternalError, "%s : type %d is not emulated", name, o.type);
    goto done;
  }
  if ((o.kind == K_ALLREDUCE || o.kind == K_REDUCE || o.kind == K_REDUCESCATTER) &&
      (o.red < 0 || o.red >= ncclNumOps)) {
    r = fail(ncclInvalidArgument, "%s : invalid reduction operation %d", name, o.red);
    goto done;
  }
  if ((o.kind == K_REDUCE || o.kind == K_BROADCAST || o.kind == K_SEND || o.kind == K_RECV) &&
      (o.root < 0 || o.root >= c->nranks)) {
    r = fail(ncclInvalidArgument, "%s : invalid root %d (communicator of %d ranks)", name,
             o.root, c->nranks);
    goto done;
  }
  {
    int sd = cudaemu::stream_device(stream);
    if (sd != c->device) {
      r = fail(ncclInvalidArgument, "%s : stream of device %d, communicator on device %d", name,
               sd, c->device);
      goto done;
    }
    const size_t es = type_size(o.type), n = (size_t)c->nranks, me = (size_t)c->rank;
    size_t sbytes = o.count * es, rbytes = o.count * es;
    bool use_send = true, use_recv = true;
    if (o.kind == K_REDUCESCATTER) sbytes = o.count * n * es;
    if (o.kind == K_ALLGATHER) rbytes = o.count * n * es;
    if (o.kind == K_REDUCE) use_recv = c->rank == o.root;  /* "only used on rank root" */
    if (o.kind == K_BROADCAST) use_send = c->rank == o.root;
    if (o.kind == K_SEND) use_recv = false;
    if (o.kind == K_RECV) use_send = false;
    if (use_send && (r = check_buf(*c, name, "sendbuff", o.send, sbytes)) != ncclSuccess)
      goto done;
    if (use_recv && (r = check_buf(*c, name, "recvbuff", o.recv, rbytes)) != ncclSuccess)
      goto done;
    /* NCCL docs, "In-place Operations": reduce-scatter in place is
     * recvbuff == sendbuff + rank·recvcount, all-gather in place is
     * sendbuff == recvbuff + rank·sendcount, the others sendbuff ==
     * recvbuff; any other overlap of the two buffers is not allowed. */
    if (use_send && use_recv && overlap(o.send, sbytes, o.recv, rbytes)) {
      bool ok;
      if (o.kind == K_REDUCESCATTER)
        ok = o.recv == o.send + me * o.count * es;
      else if (o.kind == K_ALLGATHER)
        ok = o.send == o.recv + me * o.count * es;
      else
        ok = o.send == o.recv;
      if (!ok) {
        r = fail(ncclInvalidArgument,
                 "%s : sendbuff %p and recvbuff %p overlap but are not in place (rank %d: "
                 "in place is %s; NCCL docs, In-place Operations)",
                 name, (const void *)o.send, (void *)o.recv, c->rank,
                 o.kind == K_REDUCESCATTER ? "recvbuff == sendbuff + rank*recvcount"
                 : o.kind == K_ALLGATHER   ? "sendbuff == recvbuff + rank*sendcount"
                                           : "sendbuff == recvbuff");
        goto done;
      }
    }
  }
  if (o.count == 0) goto done; /* nothing moves, on every rank alike */
  if (t_depth > 0) {
    t_pending.push_back(Pending{comm->impl, stream, o});
  } else {
    std::vector<Op> ops(1, o);
    submit(comm->impl, stream, std::move(ops), &r);
  }
done:
  if (r != ncclSuccess && t_depth > 0 && t_group_err == ncclSuccess) t_group_err = r;
  return r;
}

std::string shm_name(const ncclUniqueId &id) {
  static const char hex[] = "0123456789abcdef";
  std::string s = "/tdnccl-";
  for (int i = 8; i < 24; i++) {
    unsigned char b = (unsigned char)id.internal[i];
    s += hex[b >> 4];
    s += hex[b & 15];
  }
  return s;
}

} // namespace

/* ======================================================================== */
extern "C" {

ncclResult_t ncclGetVersion(int *version) {
  if (!version) return fail(ncclInvalidArgument, "ncclGetVersion : version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
  case ncclSuccess: return "no error";
  case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
  case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case ncclRemoteError: return "remote process exited or there was a network error";
  case ncclInProgress: return "NCCL operation in progress";
  default: return "unknown result code";
  }
}

const char *ncclGetLastError(ncclComm_t comm) {
  (void)comm; /* as in NCCL: the process's last error, whatever the communicator */
  return g_last_error;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
  if (!uniqueId) return fail(ncclInvalidArgument, "ncclGetUniqueId : uniqueId is NULL");
  memset(uniqueId, 0, sizeof *uniqueId);
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  ssize_t got = fd >= 0 ? read(fd, uniqueId->internal + 8, 32) : -1;
  if (fd >= 0) close(fd);
  if (got != 32) return fail(ncclSystemError, "ncclGetUniqueId : cannot read /dev/urandom");
  memcpy(uniqueId->internal, &kIdMagic, 4);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
  const char *fn = "ncclCommInitRank";
  if (!comm) return fail(ncclInvalidArgument, "%s : comm is NULL", fn);
  *comm = nullptr;
  uint32_t magic;
  memcpy(&magic, commId.internal, 4);
  if (magic != kIdMagic)
    return fail(ncclInvalidArgument, "%s : the unique id was not made by ncclGetUniqueId", fn);
  if (nranks < 1 || nranks > kMaxRanks)
    return fail(ncclInvalidArgument, "%s : invalid nranks %d (emulation: 1..%d)", fn, nranks,
                kMaxRanks);
  if (rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument, "%s : rank %d not in [0, %d)", fn, rank, nranks);

  std::shared_ptr<Impl> c = std::make_shared<Impl>();
  c->rank = rank, c->nranks = nranks, c->device = cudaemu::current_device();
  c->name = shm_name(commId);
  c->chunk = chunk_bytes();
  c->coll_timeout = env_seconds("TD_CUDAEMU_NCCL_COLL_TIMEOUT_S", 600);
  const double timeout = env_seconds("TD_CUDAEMU_NCCL_TIMEOUT_S", 60);
  c->pchunk = std::min<uint64_t>(p2p_chunk_bytes(), c->chunk);
  const size_t chan_bytes = ((size_t)nranks * (size_t)nranks * sizeof(Chan) + 4095) & ~(size_t)4095;
  c->map_bytes = kHeaderBytes + (size_t)nranks * c->chunk + chan_bytes +
                 (size_t)nranks * (size_t)nranks * c->pchunk;
  c->nsent.assign((size_t)nranks, 0);

  int fd = shm_open(c->name.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return fail(ncclSystemError, "%s : shm_open %s: %s", fn, c->name.c_str(), strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0 ||
      ((size_t)sb.st_size < c->map_bytes && ftruncate(fd, (off_t)c->map_bytes) != 0)) {
    int e = errno;
    close(fd);
    return fail(ncclSystemError, "%s : sizing %s: %s", fn, c->name.c_str(), strerror(e));
  }
  void *p = mmap(nullptr, c->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return fail(ncclSystemError, "%s : mmap: %s", fn, strerror(errno));
  c->h = (Header *)p;
  c->data = (char *)p + kHeaderBytes;
  c->chans = (Chan *)(c->data + (size_t)nranks * c->chunk);
  c->pdata = (char *)c->chans + chan_bytes;
  Header *h = c->h;

  ncclResult_t r = ncclSuccess;
  int32_t expect_n = 0;
  uint64_t expect_c = 0;
  h->nranks.compare_exchange_strong(expect_n, nranks);
  h->chunk.compare_exchange_strong(expect_c, c->chunk);
  int32_t seen_n = h->nranks.load();
  uint64_t seen_c = h->chunk.load();
  int32_t claimed = 0;
  if (seen_n != nranks) {
    r = fail(ncclInvalidUsage, "%s : rank %d was told nranks %d, another rank %d", fn, rank,
             nranks, seen_n);
  } else if (seen_c != c->chunk) {
    r = fail(ncclInvalidUsage, "%s : TD_CUDAEMU_NCCL_CHUNK_BYTES differs between ranks", fn);
  } else if (!h->ranks[rank].present.compare_exchange_strong(claimed, 1)) {
    r = fail(ncclInvalidUsage, "%s : rank %d joined twice", fn, rank);
  }
  if (r != ncclSuccess) {
    mark_broken(*c, WHY_INIT);
    shm_unlink(c->name.c_str());
    return r;
  }
  h->ranks[rank].device = c->device;
  snprintf(h->ranks[rank].host, sizeof h->ranks[rank].host, "%s", cudaemu::node_name());
  h->joined.fetch_add(1, std::memory_order_acq_rel);

  double t0 = now_s();
  int spins = 0;
  while (h->joined.load(std::memory_order_acquire) < nranks) {
    if (int32_t b = h->broken.load()) {
      shm_unlink(c->name.c_str());
      return fail(ncclRemoteError, "%s : rank %d failed during the initialisation", fn, b - 1);
    }
    if (now_s() - t0 > timeout) {
      mark_broken(*c, WHY_INIT);
      int j = h->joined.load();
      shm_unlink(c->name.c_str());
      return fail(ncclSystemError,
                  "%s : rank %d waited %.0f s for the other ranks: %d of %d joined "
                  "(TD_CUDAEMU_NCCL_TIMEOUT_S)",
                  fn, rank, timeout, j, nranks);
    }
    backoff(spins);
  }
  shm_unlink(c->name.c_str()); /* everyone has it mapped */
  /* NCCL (init): two ranks of one communicator may not share a GPU; every
   * rank sees the same records, so every rank fails alike. */
  for (int i = 0; i < nranks; i++)
    for (int j = i + 1; j < nranks; j++)
      if (h->ranks[i].device == h->ranks[j].device &&
          strcmp(h->ranks[i].host, h->ranks[j].host) == 0)
        return fail(ncclInvalidUsage,
                    "Duplicate GPU detected : rank %d and rank %d both on CUDA device %x", i, j,
                    h->ranks[i].device);
  ncclComm *cm = new ncclComm;
  cm->magic = kCommMagic;
  cm->impl = c;
  *comm = cm;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  Impl *c = I(comm);
  if (!c) return fail(ncclInvalidArgument, "ncclCommDestroy : not a communicator");
  /* as ncclCommFinalize does first: let queued operations finish (they end
   * by themselves: done, failed, or timed out) */
  int spins = 0;
  while (c->inflight.load() > 0) backoff(spins);
  c->h->left[c->rank].store(1);
  comm->magic = 0;
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  Impl *c = I(comm);
  if (!c) return fail(ncclInvalidArgument, "ncclCommAbort : not a communicator");
  c->local_abort.store(true);
  mark_broken(*c, WHY_ABORT);
  c->h->left[c->rank].store(1);
  comm->magic = 0;
  delete comm; /* queued jobs hold the mapping until they have left */
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
  Impl *c = I(comm);
  if (!c || !asyncError)
    return fail(ncclInvalidArgument, "ncclCommGetAsyncError : comm or asyncError is NULL");
  int32_t b = c->h->broken.load();
  if (b && b - 1 != c->rank && c->async.load() == ncclSuccess)
    set_async(*c, fail(ncclRemoteError, "rank %d %s", b - 1, why_text(c->h->broken_why.load())));
  *asyncError = (ncclResult_t)c->async.load();
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  Impl *c = I(comm);
  if (!c || !count) return fail(ncclInvalidArgument, "ncclCommCount : NULL argument");
  *count = c->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device) {
  Impl *c = I(comm);
  if (!c || !device) return fail(ncclInvalidArgument, "ncclCommCuDevice : NULL argument");
  *device = c->device;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  Impl *c = I(comm);
  if (!c || !rank) return fail(ncclInvalidArgument, "ncclCommUserRank : NULL argument");
  *rank = c->rank;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  return issue(comm, stream,
               Op{K_ALLREDUCE, (const char *)sendbuff, (char *)recvbuff, count, datatype, op, 0});
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                        cudaStream_t stream) {
  return issue(comm, stream,
               Op{K_REDUCE, (const char *)sendbuff, (char *)recvbuff, count, datatype, op, root});
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  return issue(comm, stream, Op{K_BROADCAST, (const char *)sendbuff, (char *)recvbuff, count,
                                datatype, ncclSum, root});
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  return issue(comm, stream, Op{K_REDUCESCATTER, (const char *)sendbuff, (char *)recvbuff,
                                recvcount, datatype, op, 0});
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return issue(comm, stream, Op{K_ALLGATHER, (const char *)sendbuff, (char *)recvbuff,
                                sendcount, datatype, ncclSum, 0});
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return issue(comm, stream, Op{K_SEND, (const char *)sendbuff, nullptr, count, datatype, ncclSum,
                                peer});
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return issue(comm, stream, Op{K_RECV, nullptr, (char *)recvbuff, count, datatype, ncclSum, peer});
}

ncclResult_t ncclGroupStart(void) {
  if (t_depth == 0) {
    t_pending.clear();
    t_group_err = ncclSuccess;
  }
  t_depth++;
  return ncclSuccess;
}

/* NCCL docs, "Group Calls": operations between ncclGroupStart and
 * ncclGroupEnd are issued together at the outermost ncclGroupEnd; an error
 * in one of them fails the group (nothing of it is issued). */
ncclResult_t ncclGroupEnd(void) {
  if (t_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd : no matching ncclGroupStart");
  if (--t_depth > 0) return ncclSuccess;
  std::vector<Pending> pend;
  pend.swap(t_pending);
  ncclResult_t err = t_group_err;
  t_group_err = ncclSuccess;
  if (err != ncclSuccess) return err;
  std::vector<bool> done(pend.size(), false);
  ncclResult_t r = ncclSuccess;
  for (size_t i = 0; i < pend.size(); i++) {
    if (done[i]) continue;
    std::vector<Op> ops;
    for (size_t j = i; j < pend.size(); j++)
      if (!done[j] && pend[j].impl == pend[i].impl && pend[j].stream == pend[i].stream) {
        ops.push_back(pend[j].op);
        done[j] = true;
      }
    ncclResult_t e = ncclSuccess;
    submit(pend[i].impl, pend[i].stream, std::move(ops), &e);
    if (e != ncclSuccess && r == ncclSuccess) r = e;
  }
  return r;
}

} /* extern "C" */
