/* ckpt.c — writing and reading checkpoint tensors with parallel HDF5
 * (td_ckpt.h): boxes -> hyperslab selections, MPI-IO transfers per tensor,
 * grid-independent checksums, and the save life cycle (.tmp, commit, abort).
 *
 * Selections. The file selection of a rank is the union of its boxes; HDF5
 * walks it in row-major order of GLOBAL coordinates, and walks the memory
 * selection (a union of strided 1-D hyperslabs of src) in ascending address
 * order, pairing elements in those two orders. When the boxes' memory
 * addresses increase in the file's order (one box; boxes split by rows;
 * column blocks laid out row-interleaved) the data goes straight from/to the
 * caller's buffer. Otherwise (e.g. two column blocks stored one after the
 * other) it is packed into / scattered from a staging buffer in file order.
 *
 * I/O. Datasets are contiguous, allocated at creation and never filled;
 * objects of 1 MiB or more are 1 MiB-aligned. Every rank writes its own
 * boxes with independent MPI-IO in pieces of 1 MiB, and the metadata
 * (dataset headers, attributes) is written at the close by independent
 * writes too; TD_CKPT_COLLECTIVE_MB switches large tensors and the metadata
 * to collective transfers (see collective_bytes). Every synchronisation is
 * counted: with more ranks than cores each one costs a scheduler time slice
 * (~5 ms here), so a save makes the fewest the protocol needs (the
 * communicators are made once per run, one reduction carries all
 * checksums, failures are agreed on only when there is one). No MPI-IO hints
 * are set; sites can add them (e.g. Lustre striping) through ROMIO_HINTS
 * without rebuilding. While tensors are written, every rank starts the
 * write-back of the file's dirty pages (sync_file_range, Linux) every
 * 32 MB / (ranks on its node) it wrote, so the disk works during the save
 * and the fsync of the commit finds little left to do. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "io/ckpt_internal.h"
#include "io/td_ckpt.h"
#include "io/td_h5.h"
#include "parallel/td_mpi.h"
#include "td_build.h"

/* Datasets of 1 MiB or more start on 1 MiB boundaries (file-system stripes
 * and pages); the padding is never written, so it costs no disk blocks. */
#define CKPT_ALIGN_THRESHOLD ((size_t)1 << 20)
#define CKPT_ALIGNMENT ((size_t)1 << 20)

struct td_ckpt_writer {
  MPI_Comm comm; /* the caller's, duplicated once (ckpt_comms) */
  int rank;
  int wb_fd;          /* the .tmp opened to start write-back (optional) */
  int64_t wb_pending; /* bytes this rank wrote since it last started it */
  int64_t wb_every;   /* its share of CKPT_WRITEBACK_BYTES */
  hid_t file, dxpl, dxpl_ind;
  int64_t step;
  int ntensor; /* tensors written so far */
  /* per tensor: (checksum, elements, failed) of this rank, reduced once at
   * the commit so that small tensors cost no synchronisation each */
  int npend, cap_pend;
  char (*pend_path)[160];
  uint64_t *pend; /* 3 per tensor */
  int64_t collective_bytes; /* tensors this large use collective MPI-IO */
  int crash;   /* TD_TEST_CRASH_SAVE */
  int signal_; /* TD_TEST_SIGNAL_SAVE: the signal to raise half-way, or 0 */
  char dir[TD_CKPT_PATH_MAX], name[64];
  char tmp[TD_CKPT_PATH_MAX], final_[TD_CKPT_PATH_MAX];
  /* deferred data (td_ckpt_writer_defer): the pieces td_ckpt_flush writes */
  int defer, njob, cap_job;
  struct defer_job *jobs;
  int flushed;             /* td_ckpt_flush ran (0: not yet) */
  int flush_failed;        /* ... and failed: flush_msg says why */
  char flush_msg[1024];
  int64_t flush_bytes;     /* bytes it wrote */
  int64_t delay_ms;        /* TD_TEST_SAVE_DELAY_MS (rank 0's, broadcast) */
};

/* A tensor whose data td_ckpt_flush writes: this rank's boxes of the
 * contiguous dataset whose data starts at file address `addr`. */
typedef struct defer_job {
  int64_t addr, cols;
  int pend; /* its record in pend (checksum, elements, failed) */
  int nbox;
  td_ckpt_box *box; /* a copy of the caller's */
  const float *src;
} defer_job;

struct td_ckpt_reader {
  MPI_Comm comm;
  int64_t collective_bytes; /* as the writer's */
  hid_t file, dxpl, dxpl_ind;
  char path[TD_CKPT_PATH_MAX];
  /* deferred verification (td_ckpt_read_defer): per tensor the path, the
   * stored checksum and this rank's (checksum, elements, failed) */
  int defer, npend, cap_pend;
  char (*pend_path)[160];
  uint64_t *pend; /* 5 per tensor: stored, sum, elements, failed, expected elements */
};

/* ---- communicators ------------------------------------------------------------------ */

/* A save or a load runs on a duplicate of the caller's communicator (its
 * collectives never match the caller's) and paces write-back by the number
 * of ranks on each node. Both are found the first time and then kept as an
 * attribute of the caller's communicator, freed with it: a duplicate and a
 * node split cost several synchronisations each, which with more ranks than
 * cores measured ~0.1 s of a 0.5 s save. */
typedef struct {
  MPI_Comm comm;
  int node_size;
  char made_dir[TD_CKPT_PATH_MAX]; /* the folder the last save made (every rank alike) */
  /* settings from the environment, read on rank 0 and broadcast (they decide
   * collective calls, so every rank must see the same): */
  int64_t collective_bytes; /* TD_CKPT_COLLECTIVE_MB (collective_bytes below) */
  int crash, signal_;       /* TD_TEST_CRASH_SAVE, TD_TEST_SIGNAL_SAVE */
  int64_t delay_ms;         /* TD_TEST_SAVE_DELAY_MS */
} ckpt_comms;

static void read_settings(ckpt_comms *c);

static int ckpt_comms_delete(MPI_Comm comm, int keyval, void *value, void *extra) {
  (void)comm, (void)keyval, (void)extra;
  ckpt_comms *c = value;
  if (c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
  free(c);
  return MPI_SUCCESS;
}

static td_status ckpt_comms_get(MPI_Comm comm, ckpt_comms **out) {
  static int keyval = MPI_KEYVAL_INVALID;
  if (keyval == MPI_KEYVAL_INVALID)
    TD_MPI_CHECK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, ckpt_comms_delete, &keyval, NULL));
  int found = 0;
  TD_MPI_CHECK(MPI_Comm_get_attr(comm, keyval, out, &found));
  if (found) return TD_OK;
  /* collective: every rank of comm comes here the first time alike */
  ckpt_comms *c = calloc(1, sizeof *c);
  if (!c) TD_FAIL(TD_ERR_NOMEM, "out of memory for the checkpoint communicators");
  c->comm = MPI_COMM_NULL;
  MPI_Comm node = MPI_COMM_NULL;
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0) read_settings(c);
  int64_t set[4] = {c->collective_bytes, c->crash, c->signal_, c->delay_ms};
  if (MPI_Comm_dup(comm, &c->comm) != MPI_SUCCESS ||
      MPI_Bcast(set, 4, MPI_INT64_T, 0, c->comm) != MPI_SUCCESS ||
      MPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) !=
          MPI_SUCCESS ||
      MPI_Comm_size(node, &c->node_size) != MPI_SUCCESS ||
      MPI_Comm_set_attr(comm, keyval, c) != MPI_SUCCESS) {
    if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
    ckpt_comms_delete(comm, keyval, c, NULL);
    TD_FAIL(TD_ERR_MPI, "cannot make the checkpoint communicators");
  }
  MPI_Comm_free(&node);
  c->collective_bytes = set[0], c->crash = (int)set[1], c->signal_ = (int)set[2];
  c->delay_ms = set[3];
  *out = c;
  return TD_OK;
}

td_status td_ckpt_setup(MPI_Comm comm) {
  ckpt_comms *c = NULL;
  return ckpt_comms_get(comm, &c);
}

/* ---- checksum ---------------------------------------------------------------------- */

/* Sum of the element hashes mix64(k ^ (bits << 32)) of x[0..n), k = k0 + i.
 * On x86-64 with GCC, also built for AVX2 and AVX-512 and picked at run time
 * (the 64-bit multiplies vectorise there); the result is the same. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 9
__attribute__((target_clones("default", "avx2", "arch=skylake-avx512")))
#endif
static uint64_t hash_run(const float *x, int64_t n, uint64_t k0) {
  const uint32_t *b = (const uint32_t *)(const void *)x;
  uint64_t s = 0;
  for (int64_t i = 0; i < n; ++i)
    s += td_ckpt_mix64((k0 + (uint64_t)i) ^ ((uint64_t)b[i] << 32));
  return s;
}

#define CKPT_CHUNK ((int64_t)1 << 16) /* elements per parallel piece */

uint64_t td_ckpt_checksum(const float *x, int64_t n, int64_t k0) {
  if (n < 4 * CKPT_CHUNK) return hash_run(x, n, (uint64_t)k0);
  uint64_t s = 0;
  int64_t nchunk = (n + CKPT_CHUNK - 1) / CKPT_CHUNK;
#pragma omp parallel for reduction(+ : s) schedule(static)
  for (int64_t c = 0; c < nchunk; ++c) {
    int64_t i0 = c * CKPT_CHUNK, m = n - i0 < CKPT_CHUNK ? n - i0 : CKPT_CHUNK;
    s += hash_run(x + i0, m, (uint64_t)(k0 + i0));
  }
  return s;
}

/* Partial checksum of one box of a tensor with `cols` columns, data at base. */
static uint64_t box_checksum(const td_ckpt_box *b, int64_t cols, const float *base) {
  if (b->nr <= 0 || b->nc <= 0) return 0;
  const float *x = base + b->src_off;
  /* Whole rows stored contiguously (and every 1-D box stored contiguously):
   * one run of consecutive indices. */
  if (b->nr == 1 || (b->nc == cols && b->src_ld == b->nc))
    return td_ckpt_checksum(x, b->nr * b->nc, b->r0 * cols + b->c0);
  uint64_t s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static) if (b->nr * b->nc >= 4 * CKPT_CHUNK)
  for (int64_t i = 0; i < b->nr; ++i)
    s += hash_run(x + i * b->src_ld, b->nc, (uint64_t)((b->r0 + i) * cols + b->c0));
  return s;
}

/* ---- boxes and selections ------------------------------------------------------------- */

void td_ckpt_shape_text(char *buf, size_t cap, int ndim, const int64_t *d) {
  size_t u = (size_t)snprintf(buf, cap, "(");
  for (int i = 0; i < ndim && u < cap; ++i)
    u += (size_t)snprintf(buf + u, cap - u, "%s%lld", i ? ", " : "", (long long)d[i]);
  if (u < cap) snprintf(buf + u, cap - u, ")");
}

/* Check the boxes against (rows, cols); *nelem = their element count. */
static td_status boxes_check(const char *what, const char *path, int64_t rows,
                             int64_t cols, int nbox, const td_ckpt_box *bx,
                             const void *buf, int64_t *nelem) {
  int64_t n = 0;
  TD_REQUIRE(nbox >= 0 && (nbox == 0 || bx), TD_ERR_INTERNAL,
             "tensor %s: bad box list (%d boxes)", path, nbox);
  for (int i = 0; i < nbox; ++i) {
    const td_ckpt_box *b = &bx[i];
    TD_REQUIRE(b->nr >= 0 && b->nc >= 0, TD_ERR_INTERNAL,
               "tensor %s: %s box %d has a negative size", path, what, i);
    if (b->nr == 0 || b->nc == 0) continue;
    TD_REQUIRE(b->r0 >= 0 && b->c0 >= 0 && b->r0 + b->nr <= rows &&
                   b->c0 + b->nc <= cols,
               TD_ERR_INTERNAL,
               "tensor %s (%lld x %lld): %s box %d, rows [%lld, %lld) x cols "
               "[%lld, %lld), lies outside it",
               path, (long long)rows, (long long)cols, what, i, (long long)b->r0,
               (long long)(b->r0 + b->nr), (long long)b->c0,
               (long long)(b->c0 + b->nc));
    TD_REQUIRE(b->src_off >= 0 && (b->nr == 1 || b->src_ld >= b->nc), TD_ERR_INTERNAL,
               "tensor %s: %s box %d has offset %lld and leading dimension %lld "
               "for %lld columns",
               path, what, i, (long long)b->src_off, (long long)b->src_ld,
               (long long)b->nc);
    TD_REQUIRE(buf != NULL, TD_ERR_INTERNAL, "tensor %s: %s boxes but no buffer",
               path, what);
    n += b->nr * b->nc;
  }
  *nelem = n;
  return TD_OK;
}

/* Copy one segment of n floats between base[a..] and pack[pos..]. */
static void seg_copy(float *base, int64_t a, float *pack, int64_t pos, int64_t n,
                     int dir) {
  if (dir == 0)
    memcpy(pack + pos, base + a, (size_t)n * sizeof(float));
  else
    memcpy(base + a, pack + pos, (size_t)n * sizeof(float));
}

/* Walk the boxes' segments (one row of one box) of a tensor with `cols`
 * columns in the file's row-major order. pack != NULL: copy each segment
 * from base to pack (dir = 0) or from pack to base (dir = 1). Returns
 * whether the segments' memory addresses are strictly increasing and
 * disjoint in that order (only computed when pack == NULL); -1 if out of
 * memory. */
static int walk_segments(int nbox, const td_ckpt_box *bx, int64_t cols, float *base,
                         float *pack, int dir) {
  int *idx = malloc((size_t)(nbox > 0 ? nbox : 1) * sizeof *idx);
  int m = 0, full = 1;
  int64_t rlo = INT64_MAX, rhi = 0;
  if (!idx) return -1;
  for (int i = 0; i < nbox; ++i)
    if (bx[i].nr > 0 && bx[i].nc > 0 && (bx[i].c0 != 0 || bx[i].nc != cols)) full = 0;
  /* Non-empty boxes by first row when every box holds whole rows (then the
   * file order is box after box), else by first column (insertion sort: a
   * rank holds few boxes). */
  for (int i = 0; i < nbox; ++i) {
    if (bx[i].nr == 0 || bx[i].nc == 0) continue;
    int64_t key = full ? bx[i].r0 : bx[i].c0;
    int t = m++;
    while (t > 0 && (full ? bx[idx[t - 1]].r0 : bx[idx[t - 1]].c0) > key) {
      idx[t] = idx[t - 1];
      --t;
    }
    idx[t] = i;
    if (bx[i].r0 < rlo) rlo = bx[i].r0;
    if (bx[i].r0 + bx[i].nr > rhi) rhi = bx[i].r0 + bx[i].nr;
  }
  int ordered = 1;
  int64_t prev_end = -1, pos = 0;
  if (full) {
    for (int t = 0; t < m && (ordered || pack); ++t) {
      const td_ckpt_box *b = &bx[idx[t]];
      if (pack) {
        for (int64_t i = 0; i < b->nr; ++i, pos += b->nc)
          seg_copy(base, b->src_off + i * b->src_ld, pack, pos, b->nc, dir);
      } else {
        if (b->src_off < prev_end) ordered = 0;
        prev_end = b->src_off + (b->nr - 1) * b->src_ld + b->nc;
      }
    }
  } else {
    for (int64_t r = rlo; r < rhi && (ordered || pack); ++r) {
      for (int t = 0; t < m; ++t) {
        const td_ckpt_box *b = &bx[idx[t]];
        if (r < b->r0 || r >= b->r0 + b->nr) continue;
        int64_t a = b->src_off + (r - b->r0) * b->src_ld;
        if (pack) {
          seg_copy(base, a, pack, pos, b->nc, dir);
          pos += b->nc;
        } else {
          if (a < prev_end) {
            ordered = 0;
            break;
          }
          prev_end = a + b->nc;
        }
      }
    }
  }
  free(idx);
  return ordered;
}

/* A rank's selections for one tensor. */
typedef struct {
  hid_t fspace, mspace;
  float *stage; /* staging buffer (file order) or NULL: direct */
  int64_t nelem;
} sel_t;

static void sel_free(sel_t *s) {
  td_h5_close(&s->fspace);
  td_h5_close(&s->mspace);
  td_free(s->stage);
  s->stage = NULL;
}

/* Build the file and memory selections for the boxes (already checked).
 * empty: select nothing (a rank whose boxes were rejected still takes part
 * in the collective call). */
static td_status sel_build(const char *fname, const char *path, int ndim,
                           const int64_t *gshape, int nbox, const td_ckpt_box *bx,
                           const float *buf, int empty, int64_t nelem, sel_t *s) {
  td_status st = TD_OK;
  hsize_t dims[2] = {(hsize_t)gshape[0], ndim == 2 ? (hsize_t)gshape[1] : 1};
  s->fspace = s->mspace = -1;
  s->stage = NULL;
  s->nelem = empty ? 0 : nelem;
  s->fspace = H5Screate_simple(ndim, dims, NULL);
  if (s->fspace < 0 || H5Sselect_none(s->fspace) < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: tensor %s: cannot make a dataspace: %s", fname,
                 path, td_h5_error_text());
  if (s->nelem == 0) {
    hsize_t one = 1;
    s->mspace = H5Screate_simple(1, &one, NULL);
    if (s->mspace < 0 || H5Sselect_none(s->mspace) < 0)
      TD_FAIL_GOTO(TD_ERR_HDF5, "%s: tensor %s: cannot make a dataspace: %s",
                   fname, path, td_h5_error_text());
    goto done;
  }
  int first = 1;
  int64_t extent = 0;
  for (int i = 0; i < nbox; ++i) {
    const td_ckpt_box *b = &bx[i];
    if (b->nr == 0 || b->nc == 0) continue;
    hsize_t start[2] = {(hsize_t)b->r0, (hsize_t)b->c0};
    hsize_t count[2] = {(hsize_t)b->nr, (hsize_t)b->nc};
    if (H5Sselect_hyperslab(s->fspace, first ? H5S_SELECT_SET : H5S_SELECT_OR,
                            start, NULL, count, NULL) < 0)
      TD_FAIL_GOTO(TD_ERR_HDF5, "%s: tensor %s: cannot select box %d: %s", fname,
                   path, i, td_h5_error_text());
    first = 0;
    int64_t end = b->src_off + (b->nr - 1) * b->src_ld + b->nc;
    if (end > extent) extent = end;
  }
  int ordered = walk_segments(nbox, bx, (int64_t)dims[1], (float *)buf, NULL, 0);
  if (ordered < 0)
    TD_FAIL_GOTO(TD_ERR_NOMEM, "tensor %s: out of memory sorting boxes", path);
  if (ordered) {
    hsize_t ext = (hsize_t)extent;
    s->mspace = H5Screate_simple(1, &ext, NULL);
    if (s->mspace < 0)
      TD_FAIL_GOTO(TD_ERR_HDF5, "%s: tensor %s: cannot make a dataspace: %s",
                   fname, path, td_h5_error_text());
    first = 1;
    for (int i = 0; i < nbox; ++i) {
      const td_ckpt_box *b = &bx[i];
      if (b->nr == 0 || b->nc == 0) continue;
      hsize_t start = (hsize_t)b->src_off, stride, count, block;
      if (b->nr == 1 || b->src_ld == b->nc) { /* contiguous */
        stride = 1;
        count = 1;
        block = (hsize_t)(b->nr * b->nc);
      } else {
        stride = (hsize_t)b->src_ld;
        count = (hsize_t)b->nr;
        block = (hsize_t)b->nc;
      }
      if (H5Sselect_hyperslab(s->mspace, first ? H5S_SELECT_SET : H5S_SELECT_OR,
                              &start, &stride, &count, &block) < 0)
        TD_FAIL_GOTO(TD_ERR_HDF5, "%s: tensor %s: cannot select memory of box %d: %s",
                     fname, path, i, td_h5_error_text());
      first = 0;
    }
  } else {
    TD_CHECK_GOTO(td_alloc((void **)&s->stage, (size_t)nelem * sizeof(float),
                           "checkpoint staging buffer"));
    hsize_t n = (hsize_t)nelem;
    s->mspace = H5Screate_simple(1, &n, NULL);
    if (s->mspace < 0)
      TD_FAIL_GOTO(TD_ERR_HDF5, "%s: tensor %s: cannot make a dataspace: %s",
                   fname, path, td_h5_error_text());
  }
  if (H5Sget_select_npoints(s->fspace) != (hssize_t)nelem ||
      H5Sget_select_npoints(s->mspace) != (hssize_t)nelem)
    TD_FAIL_GOTO(TD_ERR_INTERNAL,
                 "tensor %s: this rank's boxes overlap (%lld elements in the "
                 "boxes, %lld in the file selection)",
                 path, (long long)nelem, (long long)H5Sget_select_npoints(s->fspace));
done:
  if (st != TD_OK) sel_free(s);
  return st;
}

/* One allreduce of (checksum, element count, failed ranks) (sum mod 2^64). */
static td_status reduce3(MPI_Comm comm, uint64_t v[3]) {
  uint64_t in[3] = {v[0], v[1], v[2]};
  TD_MPI_CHECK(MPI_Allreduce(in, v, 3, MPI_UINT64_T, MPI_SUM, comm));
  return TD_OK;
}

/* Tensors of at least TD_CKPT_COLLECTIVE_MB MiB are written and read with
 * collective MPI-IO, the others with independent MPI-IO. The default is
 * independent for all: every rank's part of a tensor is a few large
 * contiguous pieces (ZeRO shards are flat ranges; tensor-parallel shards are
 * row blocks or row segments), and each collective call synchronises all
 * ranks, which measured 3–10× slower here (124M: 1 rank 32 s vs 6.2 s, 4
 * ranks 19.6 s vs 3.6 s). A parallel file system with many ranks per node
 * may prefer collective buffering for large tensors: set it there. Rank 0's
 * value is used by every rank (read_settings). */
#define CKPT_COLLECTIVE_BYTES_DEFAULT INT64_MAX
static int64_t collective_bytes(void) {
  const char *e = getenv("TD_CKPT_COLLECTIVE_MB");
  if (e && *e) return (int64_t)(atof(e) * 1048576.0);
  return CKPT_COLLECTIVE_BYTES_DEFAULT;
}

/* Rank 0's environment; ckpt_comms_get broadcasts it (a launcher may give
 * the ranks different environments: an MPMD launch, a site wrapper). */
static void read_settings(ckpt_comms *c) {
  c->collective_bytes = collective_bytes();
  const char *crash = getenv("TD_TEST_CRASH_SAVE");
  c->crash = crash && strcmp(crash, "1") == 0;
  const char *sig = getenv("TD_TEST_SIGNAL_SAVE");
  c->signal_ = !sig ? 0 : strcmp(sig, "USR1") == 0 ? SIGUSR1 : strcmp(sig, "TERM") == 0 ? SIGTERM : 0;
  const char *delay = getenv("TD_TEST_SAVE_DELAY_MS");
  c->delay_ms = delay && *delay ? atoll(delay) : 0;
}

static hid_t make_dxpl_mode(H5FD_mpio_xfer_t mode) {
  hid_t p = H5Pcreate(H5P_DATASET_XFER);
  if (p >= 0 && H5Pset_dxpl_mpio(p, mode) < 0) {
    H5Pclose(p);
    return -1;
  }
  return p;
}

static hid_t make_dxpl(void) {
  hid_t p = H5Pcreate(H5P_DATASET_XFER);
  if (p >= 0 && H5Pset_dxpl_mpio(p, H5FD_MPIO_COLLECTIVE) < 0) {
    H5Pclose(p);
    return -1;
  }
  return p;
}

/* Independent writes go out in pieces of at most this many bytes: the
 * kernel's page-cache copy of one large pwrite ran at ~550 MB/s here against
 * ~2.4 GB/s for 1 MiB pieces. */
#define CKPT_PIECE_BYTES ((int64_t)1 << 20)

/* Start writing the file's dirty pages to disk without waiting (Linux
 * sync_file_range), so that most of the data is on disk by the fsync of the
 * commit: the disk works while the ranks copy and checksum the next pieces.
 * Every rank starts it after each CKPT_WRITEBACK_BYTES / (ranks on its node)
 * it wrote, so a node starts it about every CKPT_WRITEBACK_BYTES. */
#define CKPT_WRITEBACK_BYTES ((int64_t)32 << 20)
static void writeback_kick(td_ckpt_writer *w, int64_t bytes) {
  if (w->wb_fd < 0) return;
  w->wb_pending += bytes;
  if (w->wb_pending < w->wb_every) return;
  w->wb_pending = 0;
#if defined(__linux__) && defined(SYNC_FILE_RANGE_WRITE)
  (void)sync_file_range(w->wb_fd, 0, 0, SYNC_FILE_RANGE_WRITE);
#endif
}

/* Write this rank's boxes of dataset d with independent I/O, piece by piece. */
static td_status write_pieces(td_ckpt_writer *w, hid_t d, const char *path, int ndim,
                              const int64_t *gshape, int nbox, const td_ckpt_box *bx,
                              const float *src) {
  td_status st = TD_OK;
  hsize_t dims[2] = {(hsize_t)gshape[0], ndim == 2 ? (hsize_t)gshape[1] : 1};
  hid_t fs = H5Screate_simple(ndim, dims, NULL);
  if (fs < 0) TD_FAIL(TD_ERR_HDF5, "%s: tensor %s: cannot make a dataspace: %s", w->tmp, path,
                      td_h5_error_text());
  int64_t piece = CKPT_PIECE_BYTES / (int64_t)sizeof(float);
  for (int i = 0; i < nbox && st == TD_OK; ++i) {
    const td_ckpt_box *b = &bx[i];
    if (b->nr == 0 || b->nc == 0) continue;
    int64_t rows = b->nc >= piece ? 1 : piece / b->nc;
    int64_t cols = b->nc >= piece ? piece : b->nc;
    for (int64_t r = 0; r < b->nr && st == TD_OK; r += rows)
      for (int64_t c = 0; c < b->nc && st == TD_OK; c += cols) {
        int64_t nr = b->nr - r < rows ? b->nr - r : rows;
        int64_t nc = b->nc - c < cols ? b->nc - c : cols;
        hsize_t start[2] = {(hsize_t)(b->r0 + r), (hsize_t)(b->c0 + c)};
        hsize_t count[2] = {(hsize_t)nr, (hsize_t)nc};
        const float *ptr = src + b->src_off + r * b->src_ld + c;
        hid_t ms = -1;
        if (nr == 1 || b->src_ld == nc) {
          hsize_t n = (hsize_t)(nr * nc);
          ms = H5Screate_simple(1, &n, NULL);
        } else {
          hsize_t md[2] = {(hsize_t)nr, (hsize_t)b->src_ld}, z[2] = {0, 0};
          ms = H5Screate_simple(2, md, NULL);
          if (ms >= 0 && H5Sselect_hyperslab(ms, H5S_SELECT_SET, z, NULL, count, NULL) < 0) {
            H5Sclose(ms);
            ms = -1;
          }
        }
        if (ms < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
            H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, w->dxpl_ind, ptr) < 0)
          st = td_error_set(TD_ERR_HDF5, __FILE__, __LINE__, __func__,
                            "%s: cannot write tensor %s: %s", w->tmp, path, td_h5_error_text());
        if (ms >= 0) H5Sclose(ms);
        writeback_kick(w, nr * nc * (int64_t)sizeof(float));
      }
  }
  H5Sclose(fs);
  return st;
}

/* Room for one more deferred tensor record: a path and `width` uint64 values
 * per tensor, grown together. */
static td_status pend_reserve(char (**paths)[160], uint64_t **vals, int width, int *cap, int n) {
  if (n < *cap) return TD_OK;
  int c = *cap ? 2 * *cap : 256;
  void *np = realloc(*paths, (size_t)c * sizeof **paths);
  if (np) *paths = np;
  void *nv = np ? realloc(*vals, (size_t)c * (size_t)width * sizeof(uint64_t)) : NULL;
  if (nv) *vals = nv;
  if (!np || !nv) TD_FAIL(TD_ERR_NOMEM, "out of memory for checkpoint checksums");
  *cap = c;
  return TD_OK;
}

/* ---- saving ---------------------------------------------------------------------------- */

static void writer_free(td_ckpt_writer *w) {
  if (!w) return;
  if (w->wb_fd >= 0) close(w->wb_fd);
  td_h5_close(&w->dxpl);
  td_h5_close(&w->dxpl_ind);
  td_h5_close(&w->file);
  free(w->pend_path);
  free(w->pend);
  for (int i = 0; i < w->njob; ++i) free(w->jobs[i].box);
  free(w->jobs);
  td_free(w);
}

/* Whether this rank can create a file in dir: a probe file
 * "<dir>/.probe.<step>.<rank>", created and removed. The error names this
 * rank's node (MPI_Get_processor_name). Not collective. */
static td_status probe_dir(const char *dir, int64_t step, int rank) {
  char path[TD_CKPT_PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/.probe.%lld.%d", dir, (long long)step, rank);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd >= 0) {
    close(fd);
    unlink(path);
    return TD_OK;
  }
  int e = errno;
  char host[MPI_MAX_PROCESSOR_NAME] = "?";
  int len = 0;
  MPI_Get_processor_name(host, &len);
  return td_error_set(TD_ERR_IO, __FILE__, __LINE__, __func__,
                      "checkpoint of step %lld not saved: the checkpoint folder %s cannot be "
                      "written on node %s (rank %d): %s; no rank saved, the previous checkpoint "
                      "is kept", (long long)step, dir, host, rank, strerror(e));
}

td_status td_ckpt_save_begin(MPI_Comm comm, const char *dir, int64_t step,
                             td_ckpt_writer **out) {
  td_status st = TD_OK;
  td_ckpt_writer *w = NULL;
  *out = NULL;
  TD_REQUIRE(dir && dir[0] && strlen(dir) < TD_CKPT_PATH_MAX - 64, TD_ERR_IO,
             "checkpoint folder name is empty or too long");
  TD_REQUIRE(step >= 0, TD_ERR_INTERNAL, "checkpoint step %lld < 0", (long long)step);
  TD_CHECK(td_alloc((void **)&w, sizeof *w, "checkpoint writer"));
  w->comm = MPI_COMM_NULL;
  w->file = w->dxpl = w->dxpl_ind = -1;
  w->wb_fd = -1;
  w->step = step;
  snprintf(w->dir, sizeof w->dir, "%s", dir);
  td_ckpt_file_name(step, w->name, sizeof w->name);
  snprintf(w->final_, sizeof w->final_, "%s/%s", dir, w->name);
  snprintf(w->tmp, sizeof w->tmp, "%s/%s.tmp", dir, w->name);
  ckpt_comms *cc = NULL;
  TD_CHECK_GOTO(ckpt_comms_get(comm, &cc));
  w->comm = cc->comm;
  w->collective_bytes = cc->collective_bytes;
  w->crash = cc->crash, w->signal_ = cc->signal_;
  w->delay_ms = cc->delay_ms;
  w->wb_every = CKPT_WRITEBACK_BYTES / cc->node_size;
  if (w->wb_every < CKPT_PIECE_BYTES) w->wb_every = CKPT_PIECE_BYTES;
  MPI_Comm_rank(w->comm, &w->rank);
  if (strcmp(cc->made_dir, dir) != 0) { /* made once per run (and folder) */
    if (w->rank == 0) st = td_ckpt_mkdir_p(dir);
    TD_CHECK_GOTO(td_agree(w->comm, st));
    snprintf(cc->made_dir, sizeof cc->made_dir, "%s", dir);
  }
  /* every rank can write the folder, or none starts: a folder that one
   * node cannot write (or see: a parallel file system not mounted there)
   * fails the save on every rank with the node named, before the file is
   * created and with `latest` untouched */
  TD_CHECK_GOTO(td_agree(w->comm, probe_dir(dir, step, w->rank)));
  w->dxpl = make_dxpl();
  w->dxpl_ind = make_dxpl_mode(H5FD_MPIO_INDEPENDENT);
  if (w->dxpl < 0)
    st = td_error_set(TD_ERR_HDF5, __FILE__, __LINE__, __func__,
                      "cannot make a transfer property list: %s", td_h5_error_text());
  else
    st = td_h5_create_aligned(w->tmp, w->comm, MPI_INFO_NULL, CKPT_ALIGN_THRESHOLD,
                              CKPT_ALIGNMENT, w->collective_bytes != INT64_MAX, &w->file);
  if (st == TD_OK) st = td_h5_attr_write_str(w->file, "format", TD_CKPT_FORMAT);
  if (st == TD_OK)
    st = td_h5_attr_write_i64(w->file, "format_version", TD_CKPT_FORMAT_VERSION);
  if (st == TD_OK)
    st = td_h5_attr_write_str(w->file, "trident_version",
                              TD_VERSION " (" TD_GIT_DESCRIBE ")");
  TD_CHECK_GOTO(td_agree(w->comm, st));
  w->wb_fd = open(w->tmp, O_RDONLY); /* optional: no write-back started without it */
  *out = w;
  w = NULL;
done:
  writer_free(w);
  return st;
}

hid_t td_ckpt_writer_file(td_ckpt_writer *w) { return w ? w->file : -1; }

/* Create the float32 dataset: contiguous, allocated at creation, never
 * filled (every element is written). */
static hid_t create_tensor(hid_t file, const char *path, int ndim,
                           const int64_t *gshape) {
  hid_t d = -1, sp = -1, dcpl = -1, lcpl = -1;
  hsize_t dims[2] = {(hsize_t)gshape[0], ndim == 2 ? (hsize_t)gshape[1] : 1};
  sp = H5Screate_simple(ndim, dims, NULL);
  dcpl = H5Pcreate(H5P_DATASET_CREATE);
  lcpl = H5Pcreate(H5P_LINK_CREATE);
  if (sp >= 0 && dcpl >= 0 && lcpl >= 0 && H5Pset_layout(dcpl, H5D_CONTIGUOUS) >= 0 &&
      H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY) >= 0 &&
      H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) >= 0 &&
      H5Pset_create_intermediate_group(lcpl, 1) >= 0)
    d = H5Dcreate2(file, path, H5T_IEEE_F32LE, sp, lcpl, dcpl, H5P_DEFAULT);
  if (lcpl >= 0) H5Pclose(lcpl);
  if (dcpl >= 0) H5Pclose(dcpl);
  if (sp >= 0) H5Sclose(sp);
  return d;
}

static td_status check_shape_arg(const char *path, int ndim, const int64_t *gshape) {
  TD_REQUIRE(path && path[0] == '/', TD_ERR_INTERNAL,
             "checkpoint tensor path '%s' must be absolute", path ? path : "(null)");
  TD_REQUIRE((ndim == 1 || ndim == 2) && gshape && gshape[0] >= 0 &&
                 (ndim == 1 || gshape[1] >= 0),
             TD_ERR_INTERNAL, "tensor %s: bad shape (rank %d)", path, ndim);
  return TD_OK;
}

/* Record this rank's boxes of dataset d for td_ckpt_flush: its data's file
 * address (contiguous, allocated at creation) and a copy of the boxes. */
static td_status defer_tensor(td_ckpt_writer *w, hid_t d, const char *path, int64_t cols,
                              int nbox, const td_ckpt_box *boxes, const float *src) {
  haddr_t addr = H5Dget_offset(d);
  if (addr == HADDR_UNDEF)
    TD_FAIL(TD_ERR_HDF5, "%s: tensor %s has no storage address: %s", w->tmp, path,
            td_h5_error_text());
  if (w->njob == w->cap_job) {
    int c = w->cap_job ? 2 * w->cap_job : 256;
    defer_job *nj = realloc(w->jobs, (size_t)c * sizeof *nj);
    if (!nj) TD_FAIL(TD_ERR_NOMEM, "out of memory for the checkpoint's deferred writes");
    w->jobs = nj, w->cap_job = c;
  }
  defer_job *j = &w->jobs[w->njob];
  j->box = malloc((size_t)nbox * sizeof *j->box);
  if (!j->box) TD_FAIL(TD_ERR_NOMEM, "out of memory for the checkpoint's deferred writes");
  memcpy(j->box, boxes, (size_t)nbox * sizeof *j->box);
  j->addr = (int64_t)addr, j->cols = cols, j->pend = w->npend, j->nbox = nbox, j->src = src;
  w->njob++;
  return TD_OK;
}

td_status td_ckpt_write_tensor(td_ckpt_writer *w, const char *path, int ndim,
                               const int64_t *gshape, int nbox,
                               const td_ckpt_box *boxes, const float *src) {
  td_status st = TD_OK, local = TD_OK;
  hid_t d = -1;
  sel_t sel = {-1, -1, NULL, 0};
  TD_REQUIRE(w && w->file >= 0, TD_ERR_INTERNAL, "checkpoint writer is not open");
  TD_CHECK(check_shape_arg(path, ndim, gshape));
  int64_t rows = gshape[0], cols = ndim == 2 ? gshape[1] : 1;
  int64_t nelem = 0;
  local = boxes_check("write", path, rows, cols, nbox, boxes, src, &nelem);
  d = create_tensor(w->file, path, ndim, gshape);
  if (d < 0) /* metadata: fails alike on every rank */
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot create dataset %s: %s", w->tmp, path,
                 td_h5_error_text());
  if (local == TD_OK) {
    local = sel_build(w->tmp, path, ndim, gshape, nbox, boxes, src, 0, nelem, &sel);
  }
  if (local != TD_OK) /* take part with nothing selected */
    TD_CHECK_GOTO(sel_build(w->tmp, path, ndim, gshape, 0, NULL, NULL, 1, 0, &sel));
  const float *data = src;
  float dummy = 0.0f;
  if (sel.stage) {
    (void)walk_segments(nbox, boxes, cols, (float *)src, sel.stage, 0);
    data = sel.stage;
  } else if (sel.nelem == 0 || !data) {
    data = &dummy;
  }
  /* An empty tensor has no storage to write to (the same on every rank). */
  int collective = rows * cols * (int64_t)sizeof(float) >= w->collective_bytes;
  int deferred = 0;
  if (w->defer && !collective && local == TD_OK && rows * cols > 0 && nelem > 0) {
    local = defer_tensor(w, d, path, cols, nbox, boxes, src);
    deferred = local == TD_OK;
  } else if (!collective && local == TD_OK && rows * cols > 0) {
    local = write_pieces(w, d, path, ndim, gshape, nbox, boxes, src);
  } else if (rows * cols > 0 && (collective || sel.nelem > 0) && (collective || local == TD_OK) &&
      H5Dwrite(d, H5T_NATIVE_FLOAT, sel.mspace, sel.fspace, collective ? w->dxpl : w->dxpl_ind,
               data) < 0 &&
      local == TD_OK)
    local = td_error_set(TD_ERR_HDF5, __FILE__, __LINE__, __func__,
                         "%s: cannot write tensor %s: %s", w->tmp, path,
                         td_h5_error_text());
  TD_CHECK_GOTO(pend_reserve(&w->pend_path, &w->pend, 3, &w->cap_pend, w->npend));
  uint64_t *v = w->pend + 3 * (size_t)w->npend;
  snprintf(w->pend_path[w->npend], sizeof w->pend_path[0], "%s", path);
  v[0] = 0, v[1] = 0, v[2] = local != TD_OK;
  if (local == TD_OK) { /* (a deferred tensor's checksum: td_ckpt_flush) */
    for (int i = 0; i < nbox && !deferred; ++i) v[0] += box_checksum(&boxes[i], cols, src);
    v[1] = (uint64_t)nelem;
  }
  w->npend++;
  /* a rank that failed keeps its message; the commit agrees on it */
  w->ntensor++;
  if (w->crash && w->ntensor == 3) {
    H5Dclose(d);
    d = -1;
    MPI_Barrier(w->comm);
    fprintf(stderr, "TD_TEST_CRASH_SAVE: killing rank %d in the middle of %s\n",
            w->rank, w->tmp);
    fflush(stderr);
    raise(SIGKILL);
  }
  if (w->signal_ && w->ntensor == 3) {
    fprintf(stderr, "TD_TEST_SIGNAL_SAVE: rank %d raises %s in the middle of %s\n", w->rank,
            w->signal_ == SIGUSR1 ? "SIGUSR1" : "SIGTERM", w->tmp);
    fflush(stderr);
    /* to the process, as a launcher or Slurm sends it (raise() would aim it
     * at this thread, where the stop signals are blocked: trident takes them
     * on a thread of its own); then wait until that thread has taken it */
    kill(getpid(), w->signal_);
    for (int i = 0; i < 5000; ++i) {
      sigset_t pending;
      if (sigpending(&pending) != 0 || !sigismember(&pending, w->signal_)) break;
      nanosleep(&(struct timespec){0, 1000000L}, NULL);
    }
    nanosleep(&(struct timespec){0, 10000000L}, NULL);
  }
done:
  sel_free(&sel);
  if (d >= 0) H5Dclose(d);
  return st;
}

/* ---- deferred data (asynchronous saves) ------------------------------------------------ */

void td_ckpt_writer_defer(td_ckpt_writer *w, int defer) {
  if (w) w->defer = defer;
}

/* Write n bytes at file offset off, whole (short writes and EINTR resumed). */
static int pwrite_full(int fd, const void *buf, size_t n, int64_t off) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = pwrite(fd, (const char *)buf + done, n - done, (off_t)(off + (int64_t)done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return r < 0 ? errno : EIO;
    done += (size_t)r;
  }
  return 0;
}

static void sleep_ms(int64_t ms) {
  struct timespec left = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

/* One row run of a box: n floats from src to the file, in pieces of
 * CKPT_PIECE_BYTES (the page-cache copy of one large pwrite is slower). */
static int flush_run(td_ckpt_writer *w, int fd, const float *src, int64_t n, int64_t off) {
  int64_t piece = CKPT_PIECE_BYTES / (int64_t)sizeof(float);
  for (int64_t i = 0; i < n; i += piece) {
    int64_t m = n - i < piece ? n - i : piece;
    int e = pwrite_full(fd, src + i, (size_t)m * sizeof(float), off + i * (int64_t)sizeof(float));
    if (e) return e;
    w->flush_bytes += m * (int64_t)sizeof(float);
    writeback_kick(w, m * (int64_t)sizeof(float));
  }
  return 0;
}

int td_ckpt_flush(td_ckpt_writer *w) {
  if (!w || w->flushed) return w && w->flush_failed ? -1 : 0;
  w->flushed = 1;
  if (w->njob == 0) return 0;
  int fd = open(w->tmp, O_WRONLY);
  int e = fd < 0 ? errno : 0;
  const char *what = NULL;
  int saved_wb = w->wb_fd;
  if (fd >= 0) w->wb_fd = fd; /* write-back started on the descriptor that writes */
  for (int i = 0; i < w->njob && !e; ++i) {
    defer_job *j = &w->jobs[i];
    if (w->delay_ms > 0 && i == w->njob / 2) sleep_ms(w->delay_ms); /* test: in flight */
    uint64_t sum = 0;
    for (int b = 0; b < j->nbox && !e; ++b) {
      const td_ckpt_box *x = &j->box[b];
      if (x->nr == 0 || x->nc == 0) continue;
      const float *base = j->src + x->src_off;
      int64_t at = j->addr + (x->r0 * j->cols + x->c0) * (int64_t)sizeof(float);
      if (x->nr == 1 || (x->nc == j->cols && x->src_ld == x->nc))
        e = flush_run(w, fd, base, x->nr * x->nc, at);
      else
        for (int64_t r = 0; r < x->nr && !e; ++r)
          e = flush_run(w, fd, base + r * x->src_ld, x->nc,
                        at + r * j->cols * (int64_t)sizeof(float));
      if (!e) sum += box_checksum(x, j->cols, j->src);
    }
    w->pend[3 * (size_t)j->pend] = sum;
    if (e) what = w->pend_path[j->pend];
  }
  /* durable now, so that the commit's fsync finds nothing left to write */
  if (!e && fd >= 0 && fdatasync(fd) != 0) e = errno;
  if (fd >= 0 && close(fd) != 0 && !e) e = errno;
  w->wb_fd = saved_wb;
  if (!e) return 0;
  w->flush_failed = 1;
  if (what)
    snprintf(w->flush_msg, sizeof w->flush_msg, "%s: cannot write tensor %s: %s", w->tmp, what,
             strerror(e));
  else
    snprintf(w->flush_msg, sizeof w->flush_msg, "%s: cannot write the checkpoint's data: %s",
             w->tmp, strerror(e));
  return -1;
}

int64_t td_ckpt_flush_bytes(const td_ckpt_writer *w) { return w ? w->flush_bytes : 0; }

/* Close the .tmp of a save that failed (its data are garbage). The close
 * still flushes HDF5's metadata; on a full disk that fails, and HDF5 1.10
 * keeps a half-closed file that it dereferences at MPI_Finalize (SIGSEGV in
 * H5F__close_cb). So each rank first truncates the .tmp, which gives its
 * data's space back, then closes, and if a close fails all the same it tries
 * once more. Collective (H5Fclose). */
static void close_failed(td_ckpt_writer *w) {
  if (w->file < 0) return;
  if (truncate(w->tmp, 0) != 0) { /* (gone or unwritable: the close may still work) */
  }
  if (H5Fclose(w->file) < 0 && H5Iis_valid(w->file) > 0) H5Fclose(w->file);
  w->file = -1;
  H5Eclear2(H5E_DEFAULT);
}

td_status td_ckpt_save_commit(td_ckpt_writer **wp, int keep, char *final_path,
                              size_t cap) {
  td_status st = TD_OK;
  td_ckpt_writer *w = wp ? *wp : NULL;
  int renamed = 0;
  if (cap) final_path[0] = '\0';
  TD_REQUIRE(w && w->file >= 0, TD_ERR_INTERNAL, "checkpoint writer is not open");
  *wp = NULL;
  /* deferred data: written (td_ckpt_flush), or its failure marked on the
   * tensors, whose agreement below reports it like a failed write */
  if (w->njob > 0 && !w->flushed) (void)td_ckpt_flush(w);
  if (w->flush_failed) {
    td_error_set(TD_ERR_IO, __FILE__, __LINE__, __func__, "%s", w->flush_msg);
    for (int i = 0; i < w->njob; ++i) w->pend[3 * (size_t)w->jobs[i].pend + 2] = 1;
  }
  /* 0. checksums and element counts of every tensor: one reduction, then the
   * attributes (metadata, the same on every rank). */
  {
    int n = w->npend;
    uint64_t *sum = calloc((size_t)3 * (n > 0 ? n : 1), sizeof(uint64_t));
    if (!sum) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory");
    uint64_t failed = 0;
    for (int i = 0; i < n; ++i) failed |= w->pend[3 * i + 2];
    st = failed ? td_error_status() : TD_OK;
    int reduced = n == 0 || MPI_Allreduce(w->pend, sum, 3 * n, MPI_UINT64_T, MPI_SUM,
                                          w->comm) == MPI_SUCCESS;
    if (!reduced)
      st = td_error_set(TD_ERR_MPI, __FILE__, __LINE__, __func__, "reducing checksums failed");
    /* the reduction also counted the ranks that failed: agree on a message
     * only when there is one (every rank sees the same count) */
    uint64_t nfailed = 0;
    for (int i = 0; i < n && reduced; ++i) nfailed += sum[3 * i + 2];
    td_status agreed = !reduced || nfailed ? td_agree(w->comm, st) : TD_OK;
    for (int i = 0; i < n && agreed == TD_OK; ++i) {
      hid_t d = H5Dopen2(w->file, w->pend_path[i], H5P_DEFAULT);
      hsize_t dims[2] = {1, 1};
      hid_t sp = d >= 0 ? H5Dget_space(d) : -1;
      int nd = sp >= 0 ? H5Sget_simple_extent_dims(sp, dims, NULL) : -1;
      if (sp >= 0) H5Sclose(sp);
      uint64_t expect = nd == 2 ? dims[0] * dims[1] : nd == 1 ? dims[0] : 0;
      if (d < 0)
        agreed = td_error_set(TD_ERR_HDF5, __FILE__, __LINE__, __func__, "%s: cannot reopen %s: %s",
                              w->tmp, w->pend_path[i], td_h5_error_text());
      else if (sum[3 * i + 1] != expect)
        agreed = td_error_set(TD_ERR_INTERNAL, __FILE__, __LINE__, __func__,
                              "tensor %s: the ranks' boxes hold %llu elements, the tensor %llu",
                              w->pend_path[i], (unsigned long long)sum[3 * i + 1],
                              (unsigned long long)expect);
      else
        agreed = td_h5_attr_write_u64(d, "checksum", sum[3 * i]);
      if (d >= 0) H5Dclose(d);
    }
    free(sum);
    st = agreed;
    if (st != TD_OK) {
      close_failed(w);
      goto done;
    }
  }
  td_h5_close(&w->dxpl);
  td_h5_close(&w->dxpl_ind);
  /* 1. close, 2. durable: every rank, once its own writes (data and its share
   * of the metadata) are handed to the OS by the close, flushes the file
   * (after the first flush on a node the others find little left to do);
   * one agreement then says that every byte is on disk. */
  if (H5Fclose(w->file) < 0) {
    st = td_error_set(TD_ERR_HDF5, __FILE__, __LINE__, __func__,
                      "%s: cannot close: %s", w->tmp, td_h5_error_text());
    if (H5Iis_valid(w->file) > 0) close_failed(w);
  }
  w->file = -1;
  if (st == TD_OK) st = td_ckpt_fsync_path(w->tmp, 0);
  TD_CHECK_GOTO(td_agree(w->comm, st));
  /* 3. publish: rename, then `latest` (rank 0). */
  if (w->rank == 0)
    st = td_ckpt_publish(w->dir, w->tmp, w->final_, w->name, &renamed);
  /* (`renamed` matters to rank 0 alone: it removes the .tmp on failure) */
  TD_CHECK_GOTO(td_agree(w->comm, st));
  /* 4. committed: rank 0 deletes what `keep` no longer asks for while the
   * others go on */
  if (w->rank == 0) td_ckpt_prune(w->dir, w->step, keep);
  int n = snprintf(final_path, cap, "%s", w->final_);
  if (n < 0 || (size_t)n >= cap)
    TD_FAIL_GOTO(TD_ERR_INTERNAL, "checkpoint path %s longer than %zu", w->final_, cap);
done:
  if (st != TD_OK && !renamed && w->rank == 0) unlink(w->tmp);
  writer_free(w);
  return st;
}

void td_ckpt_save_abort(td_ckpt_writer **wp) {
  if (!wp || !*wp) return;
  td_ckpt_writer *w = *wp;
  *wp = NULL;
  /* Closing is collective (MPI-IO) and so is the barrier: a rank failing
   * alone only unlinks the .tmp (the others' writes go to the unlinked file
   * until the abort ends them). */
  if (td_error_alone()) {
    unlink(w->tmp); /* its space comes back when the job ends */
    return;
  }
  td_h5_close(&w->dxpl);
  close_failed(w);
  MPI_Barrier(w->comm);
  if (w->rank == 0) unlink(w->tmp);
  writer_free(w);
}

/* ---- loading ------------------------------------------------------------------------------ */

static void reader_free(td_ckpt_reader *r) {
  if (!r) return;
  td_h5_close(&r->dxpl);
  td_h5_close(&r->dxpl_ind);
  free(r->pend_path);
  free(r->pend);
  td_h5_close(&r->file);
  td_free(r);
}

/* Replace the pending error by TD_ERR_CKPT "prefix: <old message>". */
static td_status as_ckpt_error(const char *file, int line, const char *func,
                               const char *path, const char *what) {
  char msg[1536];
  snprintf(msg, sizeof msg, "%s", td_error_message());
  td_error_clear();
  return td_error_set(TD_ERR_CKPT, file, line, func, "%s: %s (%s)", path, what, msg);
}

/* Integer root attribute `name` of n elements (1: a scalar), each >= lo;
 * TD_ERR_CKPT naming the file and the attribute otherwise. */
static td_status root_ints(hid_t f, const char *path, const char *name, int n, int64_t lo,
                           int64_t *v) {
  td_status st = n == 1 ? td_h5_attr_read_i64(f, path, name, v)
                        : td_h5_attr_read_i64v(f, path, name, v, n);
  if (st != TD_OK) {
    char what[160];
    snprintf(what, sizeof what, "bad or missing root attribute '%s' (%d integer%s >= %lld "
             "expected)", name, n, n == 1 ? "" : "s", (long long)lo);
    return as_ckpt_error(__FILE__, __LINE__, __func__, path, what);
  }
  for (int i = 0; i < n; ++i) {
    if (v[i] >= lo) continue;
    char which[32] = "";
    if (n > 1) snprintf(which, sizeof which, "[%d]", i);
    TD_FAIL(TD_ERR_CKPT, "%s: root attribute '%s'%s is %lld; expected an integer >= %lld", path,
            name, which, (long long)v[i], (long long)lo);
  }
  return TD_OK;
}

/* Check the root attributes of an open file (any driver): `format`,
 * `format_version`, and the ones format 1 requires of every save: `step`
 * and `tokens_seen` (integers >= 0), `saved_grid` (3 integers >= 1). On an
 * MPI-IO file every rank makes the same calls (collective metadata reads). */
td_status td_ckpt_check_root(hid_t f, const char *path) {
  char fmt[128] = "";
  htri_t ex = H5Aexists(f, "format");
  if (ex <= 0) {
    H5Eclear2(H5E_DEFAULT);
    TD_FAIL(TD_ERR_CKPT,
            "%s: not a trident checkpoint (no root attribute 'format' = \"%s\")",
            path, TD_CKPT_FORMAT);
  }
  if (td_h5_attr_read_str(f, path, "format", fmt, sizeof fmt) != TD_OK)
    return as_ckpt_error(__FILE__, __LINE__, __func__, path,
                         "not a trident checkpoint: bad attribute 'format'");
  TD_REQUIRE(strcmp(fmt, TD_CKPT_FORMAT) == 0, TD_ERR_CKPT,
             "%s: not a trident checkpoint (attribute 'format' is \"%s\", "
             "expected \"%s\")",
             path, fmt, TD_CKPT_FORMAT);
  int64_t ver = 0;
  if (td_h5_attr_read_i64(f, path, "format_version", &ver) != TD_OK)
    return as_ckpt_error(__FILE__, __LINE__, __func__, path,
                         "bad or missing attribute 'format_version'");
  TD_REQUIRE(ver == TD_CKPT_FORMAT_VERSION, TD_ERR_CKPT,
             "%s: checkpoint format_version is %lld; this trident reads version %d",
             path, (long long)ver, TD_CKPT_FORMAT_VERSION);
  int64_t v[3];
  TD_CHECK(root_ints(f, path, "step", 1, 0, v));
  TD_CHECK(root_ints(f, path, "tokens_seen", 1, 0, v));
  TD_CHECK(root_ints(f, path, "saved_grid", 3, 1, v));
  return TD_OK;
}

td_status td_ckpt_open(MPI_Comm comm, const char *path, td_ckpt_reader **out) {
  td_status st = TD_OK;
  td_ckpt_reader *r = NULL;
  *out = NULL;
  TD_REQUIRE(path && path[0] && strlen(path) < TD_CKPT_PATH_MAX, TD_ERR_CKPT,
             "checkpoint path is empty or too long");
  TD_CHECK(td_alloc((void **)&r, sizeof *r, "checkpoint reader"));
  r->comm = MPI_COMM_NULL;
  r->file = r->dxpl = r->dxpl_ind = -1;
  snprintf(r->path, sizeof r->path, "%s", path);
  ckpt_comms *cc = NULL;
  TD_CHECK_GOTO(ckpt_comms_get(comm, &cc));
  r->comm = cc->comm;
  r->collective_bytes = cc->collective_bytes;
  if (access(path, R_OK) != 0)
    st = td_error_set(TD_ERR_CKPT, __FILE__, __LINE__, __func__,
                      "%s: cannot read checkpoint: %s", path, strerror(errno));
  TD_CHECK_GOTO(td_agree(r->comm, st));
  st = td_h5_open(path, r->comm, 0, &r->file);
  if (st != TD_OK)
    st = as_ckpt_error(__FILE__, __LINE__, __func__, path,
                       "not a readable HDF5 checkpoint: missing, truncated or "
                       "not HDF5");
  if (st == TD_OK) st = td_ckpt_check_root(r->file, path);
  if (st == TD_OK) {
    r->dxpl = make_dxpl();
    r->dxpl_ind = make_dxpl_mode(H5FD_MPIO_INDEPENDENT);
    if (r->dxpl < 0)
      st = td_error_set(TD_ERR_HDF5, __FILE__, __LINE__, __func__,
                        "cannot make a transfer property list: %s", td_h5_error_text());
  }
  TD_CHECK_GOTO(td_agree(r->comm, st));
  *out = r;
  r = NULL;
done:
  reader_free(r);
  return st;
}

hid_t td_ckpt_reader_file(td_ckpt_reader *r) { return r ? r->file : -1; }
const char *td_ckpt_reader_path(td_ckpt_reader *r) { return r ? r->path : ""; }

void td_ckpt_read_defer(td_ckpt_reader *r, int defer) { r->defer = defer; }

td_status td_ckpt_read_finish(td_ckpt_reader *r) {
  td_status st = TD_OK;
  int n = r->npend;
  uint64_t failed = 0;
  uint64_t *mine = calloc((size_t)3 * (n > 0 ? n : 1), sizeof(uint64_t));
  uint64_t *sum = calloc((size_t)3 * (n > 0 ? n : 1), sizeof(uint64_t));
  if (!mine || !sum) {
    free(mine);
    free(sum);
    TD_FAIL(TD_ERR_NOMEM, "out of memory");
  }
  for (int i = 0; i < n; ++i) {
    mine[3 * i] = r->pend[5 * i + 1], mine[3 * i + 1] = r->pend[5 * i + 2];
    mine[3 * i + 2] = r->pend[5 * i + 3];
    failed |= r->pend[5 * i + 3];
  }
  st = failed ? td_error_status() : TD_OK;
  if (n > 0 && MPI_Allreduce(mine, sum, 3 * n, MPI_UINT64_T, MPI_SUM, r->comm) != MPI_SUCCESS)
    st = td_error_set(TD_ERR_MPI, __FILE__, __LINE__, __func__, "reducing checksums failed");
  st = td_agree(r->comm, st);
  for (int i = 0; i < n && st == TD_OK; ++i) {
    uint64_t total = r->pend[5 * i + 4];
    if (total == UINT64_MAX) continue; /* not verified */
    if (sum[3 * i + 1] != total)
      st = td_error_set(TD_ERR_INTERNAL, __FILE__, __LINE__, __func__,
                        "tensor %s: the ranks' verify boxes hold %llu elements, the tensor %lld",
                        r->pend_path[i], (unsigned long long)sum[3 * i + 1],
                        (long long)total);
    else if (sum[3 * i] != r->pend[5 * i])
      st = td_error_set(TD_ERR_CKPT, __FILE__, __LINE__, __func__,
                        "%s: tensor %s: CHECKSUM MISMATCH (stored 0x%016llx, computed 0x%016llx): "
                        "the file is damaged",
                        r->path, r->pend_path[i], (unsigned long long)r->pend[5 * i],
                        (unsigned long long)sum[3 * i]);
  }
  if (st != TD_OK) td_error_mark_agreed(); /* every rank found the same */
  r->npend = 0;
  free(mine);
  free(sum);
  return st;
}

void td_ckpt_close(td_ckpt_reader **r) {
  if (!r || !*r) return;
  /* closing is collective (MPI-IO): not when this rank fails alone */
  if (!td_error_alone()) reader_free(*r);
  *r = NULL;
}

/* Open tensor `path` and check it is a float dataset of shape gshape. Same
 * result on every rank (metadata). */
static td_status open_tensor(td_ckpt_reader *r, const char *path, int ndim,
                             const int64_t *gshape, hid_t *out) {
  td_status st = TD_OK;
  hid_t d = -1, sp = -1, t = -1;
  *out = -1;
  if (!td_h5_exists(r->file, path))
    TD_FAIL(TD_ERR_CKPT, "%s: tensor %s is missing", r->path, path);
  d = H5Dopen2(r->file, path, H5P_DEFAULT);
  if (d < 0)
    TD_FAIL_GOTO(TD_ERR_CKPT, "%s: %s is not a readable tensor: %s", r->path, path,
                 td_h5_error_text());
  sp = H5Dget_space(d);
  t = H5Dget_type(d);
  int fr = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
  if (fr < 0 || t < 0)
    TD_FAIL_GOTO(TD_ERR_CKPT, "%s: tensor %s: cannot inspect: %s", r->path, path,
                 td_h5_error_text());
  if (H5Tget_class(t) != H5T_FLOAT)
    TD_FAIL_GOTO(TD_ERR_CKPT, "%s: tensor %s is not floating point", r->path, path);
  hsize_t hd[H5S_MAX_RANK];
  int64_t fd[H5S_MAX_RANK];
  H5Sget_simple_extent_dims(sp, hd, NULL);
  int same = fr == ndim;
  for (int i = 0; i < fr; ++i) {
    fd[i] = (int64_t)hd[i];
    if (same && fd[i] != gshape[i]) same = 0;
  }
  if (!same) {
    char want[256], got[256];
    td_ckpt_shape_text(want, sizeof want, ndim, gshape);
    td_ckpt_shape_text(got, sizeof got, fr, fd);
    TD_FAIL_GOTO(TD_ERR_CKPT, "%s: tensor %s has shape %s, expected %s", r->path,
                 path, got, want);
  }
  *out = d;
  d = -1;
done:
  if (t >= 0) H5Tclose(t);
  if (sp >= 0) H5Sclose(sp);
  if (d >= 0) H5Dclose(d);
  return st;
}

td_status td_ckpt_read_tensor(td_ckpt_reader *r, const char *path, int ndim,
                              const int64_t *gshape, int nbox,
                              const td_ckpt_box *boxes, float *dst, int verify,
                              int nvbox, const td_ckpt_box *vboxes) {
  td_status st = TD_OK, local = TD_OK;
  hid_t d = -1;
  sel_t sel = {-1, -1, NULL, 0};
  TD_REQUIRE(r && r->file >= 0, TD_ERR_INTERNAL, "checkpoint reader is not open");
  TD_CHECK(check_shape_arg(path, ndim, gshape));
  int64_t rows = gshape[0], cols = ndim == 2 ? gshape[1] : 1;
  int64_t nelem = 0, nv = 0;
  TD_CHECK_GOTO(open_tensor(r, path, ndim, gshape, &d));
  local = boxes_check("read", path, rows, cols, nbox, boxes, dst, &nelem);
  if (local == TD_OK && verify)
    local = boxes_check("verify", path, rows, cols, nvbox, vboxes, dst, &nv);
  if (local == TD_OK)
    local = sel_build(r->path, path, ndim, gshape, nbox, boxes, dst, 0, nelem, &sel);
  if (local != TD_OK) /* take part with nothing selected */
    TD_CHECK_GOTO(sel_build(r->path, path, ndim, gshape, 0, NULL, NULL, 1, 0, &sel));
  float dummy = 0.0f;
  float *data = sel.stage ? sel.stage : (sel.nelem == 0 || !dst) ? &dummy : dst;
  int collective = rows * cols * (int64_t)sizeof(float) >= r->collective_bytes;
  if (rows * cols > 0 && (collective || sel.nelem > 0) &&
      H5Dread(d, H5T_NATIVE_FLOAT, sel.mspace, sel.fspace,
              collective || r->dxpl_ind < 0 ? r->dxpl : r->dxpl_ind, data) < 0 &&
      local == TD_OK)
    local = td_error_set(TD_ERR_HDF5, __FILE__, __LINE__, __func__,
                         "%s: cannot read tensor %s: %s", r->path, path,
                         td_h5_error_text());
  if (local == TD_OK && sel.stage) (void)walk_segments(nbox, boxes, cols, dst, sel.stage, 1);
  uint64_t v[3] = {0, 0, local != TD_OK};
  if (local == TD_OK && verify) {
    for (int i = 0; i < nvbox; ++i) v[0] += box_checksum(&vboxes[i], cols, dst);
    v[1] = (uint64_t)nv;
  }
  if (r->defer) { /* checked together by td_ckpt_read_finish */
    TD_CHECK_GOTO(pend_reserve(&r->pend_path, &r->pend, 5, &r->cap_pend, r->npend));
    uint64_t *q = r->pend + 5 * (size_t)r->npend;
    uint64_t stored = 0;
    if (verify) {
      /* every rank makes these metadata reads (collective metadata reads are
       * on), also one whose own read failed: it keeps its first error */
      htri_t ex = H5Aexists(d, "checksum");
      td_status a = TD_OK;
      if (ex <= 0) {
        H5Eclear2(H5E_DEFAULT);
        if (local == TD_OK)
          a = td_error_set(TD_ERR_CKPT, __FILE__, __LINE__, __func__,
                           "%s: tensor %s has no checksum attribute", r->path, path);
      } else if (td_h5_attr_read_u64(d, r->path, "checksum", &stored) != TD_OK && local == TD_OK) {
        a = as_ckpt_error(__FILE__, __LINE__, __func__, r->path, "bad checksum attribute");
      }
      if (local == TD_OK) local = a;
    }
    snprintf(r->pend_path[r->npend], sizeof r->pend_path[0], "%s", path);
    q[0] = stored, q[1] = v[0], q[2] = v[1], q[3] = local != TD_OK;
    q[4] = verify ? (uint64_t)(rows * cols) : UINT64_MAX; /* MAX: not verified */
    r->npend++;
    goto done;
  }
  TD_CHECK_GOTO(reduce3(r->comm, v));
  if (v[2]) TD_CHECK_GOTO(td_agree(r->comm, local));
  if (verify) {
    if (v[1] != (uint64_t)(rows * cols))
      TD_FAIL_GOTO(TD_ERR_INTERNAL,
                   "tensor %s: the ranks' verify boxes hold %llu elements, the "
                   "tensor %lld",
                   path, (unsigned long long)v[1], (long long)(rows * cols));
    uint64_t stored = 0;
    htri_t ex = H5Aexists(d, "checksum");
    if (ex <= 0) {
      H5Eclear2(H5E_DEFAULT);
      TD_FAIL_GOTO(TD_ERR_CKPT, "%s: tensor %s has no checksum attribute", r->path,
                   path);
    }
    if (td_h5_attr_read_u64(d, r->path, "checksum", &stored) != TD_OK) {
      st = as_ckpt_error(__FILE__, __LINE__, __func__, r->path,
                         "bad checksum attribute");
      goto done;
    }
    if (stored != v[0])
      TD_FAIL_GOTO(TD_ERR_CKPT,
                   "%s: tensor %s: CHECKSUM MISMATCH (stored 0x%016llx, computed "
                   "0x%016llx): the file is damaged",
                   r->path, path, (unsigned long long)stored,
                   (unsigned long long)v[0]);
  }
done:
  sel_free(&sel);
  if (d >= 0) H5Dclose(d);
  return st;
}
