/* td_ckpt.h — parallel-HDF5 checkpoints (docs/architecture.md "Checkpoint file (format 1)",
 * invariants 2-4).
 *
 * This module knows nothing about GPT-2 or about how tensors are sharded:
 * callers describe what each rank holds as boxes in GLOBAL coordinates, and
 * every tensor is stored in its full logical shape, so any decomposition can
 * read what any other wrote.
 *
 * Saving (all collective on the writer's comm, same calls in the same order
 * on every rank):
 *   td_ckpt_save_begin   -> <dir>/step_XXXXXXXX.h5.tmp
 *   td_ckpt_write_tensor  (per tensor) + root attributes, /config, /data, /rng
 *                         through td_ckpt_writer_file() and td_h5
 *   td_ckpt_save_commit  -> close, fsync, rename to step_XXXXXXXX.h5, fsync the
 *                           folder, then `latest` (atomically), then pruning
 *   td_ckpt_save_abort    on error instead of commit
 * A save that dies anywhere before the rename leaves only a .tmp file, which
 * nothing reads; `latest` is only ever replaced (by rename) after the file it
 * names is complete and durable.
 *
 * Checksum (attribute `checksum` on every tensor written here): an unsigned
 * 64-bit integer attribute (H5T_STD_U64LE; h5py reads a numpy.uint64),
 *     checksum = sum over elements, mod 2^64, of mix64(k ^ (bits << 32))
 * where k is the element's row-major flat index in the GLOBAL shape, bits the
 * 32 bits of the stored float32 (as an unsigned 64-bit integer, shifted into
 * the high half) and mix64 is td_mix64 (common/td_rng.h): x += 0x9e3779b97f4a7c15,
 * then the splitmix64 finaliser (x ^= x >> 30, x *= 0xbf58476d1ce4e5b9,
 * x ^= x >> 27, x *= 0x94d049bb133111eb, x ^= x >> 31), a bijection:
 * changing any one element always changes the sum. The sum is order-free, so the value is the same whatever grid or
 * boxes wrote or read the tensor. In NumPy (uint64 arithmetic wraps):
 *   b = a.reshape(-1).view(np.uint32).astype(np.uint64)
 *   k = np.arange(b.size, dtype=np.uint64)
 *   checksum = mix64(k ^ (b << np.uint64(32))).sum(dtype=np.uint64)
 *
 * Test switch: environment variable TD_TEST_CRASH_SAVE=1 makes the THIRD
 * td_ckpt_write_tensor call of a save, after its data is written and every
 * rank has reached that point, raise(SIGKILL) on every rank — a save killed
 * half-way, for the crash test (tests/unit/ckpt_crash.sh). Likewise
 * TD_TEST_SIGNAL_SAVE=USR1 or TERM makes every rank send itself that signal at the
 * same point of every save (tests/e2e/ckpt_signal_in_save.sh). Never set
 * them outside tests.
 *
 * Errors: bad input (a file that is not a checkpoint, a missing tensor, a
 * wrong shape, a checksum mismatch, a dangling `latest`) is TD_ERR_CKPT with
 * a message naming the file and the tensor; I/O failures are TD_ERR_IO /
 * TD_ERR_HDF5. The collective functions return the same status on every rank
 * (agreed with td_agree), so callers can end the job cleanly. */
#ifndef TD_CKPT_H
#define TD_CKPT_H

#include <hdf5.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>

#include "td_error.h"

/* Format identification (root attributes `format`, `format_version`). */
#define TD_CKPT_FORMAT "trident-checkpoint"
#define TD_CKPT_FORMAT_VERSION 1

/* A 2-D box of a global tensor held by this rank: rows [r0, r0+nr) x cols
 * [c0, c0+nc) of the global (rows, cols) shape (1-D tensors: rows = n,
 * cols = 1, so c0 = 0, nc = 1), whose data is at src[src_off + i*src_ld + j]
 * (0 <= i < nr, 0 <= j < nc) of the writer's src (the reader's dst).
 * A box with nr == 0 or nc == 0 is allowed and holds nothing. */
typedef struct {
  int64_t r0, nr, c0, nc;
  int64_t src_off, src_ld;
} td_ckpt_box;

typedef struct td_ckpt_writer td_ckpt_writer;
typedef struct td_ckpt_reader td_ckpt_reader;

/* ---- saving ------------------------------------------------------------------ */

/* Collective on comm: make now what every save and load on comm needs (a
 * duplicate of comm and the number of its ranks on this node, kept with comm
 * until it is freed), so that the first save does not pay for it. Optional. */
td_status td_ckpt_setup(MPI_Comm comm);

/* Collective on comm: rank 0 creates dir (mkdir -p; once per run and
 * folder), then all ranks create
 * <dir>/step_XXXXXXXX.h5.tmp (8-digit step, more digits past 99,999,999)
 * with MPI-IO (truncating a stale .tmp of the same step), and write the root
 * attributes this module owns: `format`, `format_version` and
 * `trident_version` ("0.1.0 (git describe)"). The caller writes `step`,
 * `tokens_seen`, `saved_grid`, /config, /data, /rng and the /optim
 * attributes through td_ckpt_writer_file(). The writer works on a duplicate
 * of comm (td_ckpt_setup), never on comm itself. */
td_status td_ckpt_save_begin(MPI_Comm comm, const char *dir, int64_t step,
                             td_ckpt_writer **out);

/* Collective: every rank calls for every tensor in the same order, with the
 * same path/ndim/gshape and its own boxes (nbox may be 0; src may then be
 * NULL). Creates the float32 dataset `path` (e.g. "/model/wte.weight",
 * intermediate groups created; contiguous layout) of global shape gshape
 * (ndim 1: (n), ndim 2: (rows, cols)); each rank writes its boxes with one
 * H5Dwrite: independent MPI-IO (no synchronisation per tensor), or collective
 * for tensors of at least $TD_CKPT_COLLECTIVE_MB MiB when that is set (rank 0's
 * environment decides for all). The boxes of all ranks must cover the
 * tensor exactly once: boxes outside the shape and a total element count
 * different from the tensor's are errors (TD_ERR_INTERNAL; overlaps that
 * happen to compensate holes are not detected), reported — like a failed
 * write on any rank — by td_ckpt_save_commit, which also stores every
 * tensor's `checksum` attribute (see above) after one reduction for all. */
td_status td_ckpt_write_tensor(td_ckpt_writer *w, const char *path, int ndim,
                               const int64_t *gshape, int nbox,
                               const td_ckpt_box *boxes, const float *src);

/* Deferred data, for asynchronous saves: after td_ckpt_writer_defer(w, 1)
 * (same value on every rank), td_ckpt_write_tensor creates each dataset and
 * records this rank's boxes with the dataset's file address instead of
 * writing them (tensors written collectively, TD_CKPT_COLLECTIVE_MB, are
 * still written at once); src must then stay unchanged until td_ckpt_flush
 * has returned. td_ckpt_flush writes the recorded boxes into the .tmp with
 * pwrite, at the addresses HDF5 allocated (the bytes an independent H5Dwrite
 * puts there: the file is the one a save without deferral writes), computes
 * their checksums and fdatasyncs the file. It is not collective and calls
 * neither MPI nor HDF5 nor the td_error functions, so another thread may run
 * it while this one trains (MPI_THREAD_FUNNELED suffices); nothing else may
 * use w meanwhile. Returns 0, or -1 with the reason kept for
 * td_ckpt_save_commit, which reports it on every rank like a failed write
 * ("FILE.tmp: cannot write tensor /model/x: No space left on device"). The
 * commit flushes first if it has not run. Test switch: TD_TEST_SAVE_DELAY_MS
 * (rank 0's, for every rank) pauses td_ckpt_flush that long half-way. */
void td_ckpt_writer_defer(td_ckpt_writer *w, int defer);
int td_ckpt_flush(td_ckpt_writer *w);
/* Bytes td_ckpt_flush wrote on this rank. */
int64_t td_ckpt_flush_bytes(const td_ckpt_writer *w);

/* The open .tmp file, for root attributes, /config, /data, /rng written with
 * td_h5 (collective metadata: every rank makes the same calls). */
hid_t td_ckpt_writer_file(td_ckpt_writer *w);

/* Collective: close the file; make it durable (every rank reopens it and
 * fsyncs it after its own close); rank 0 renames .tmp -> .h5, fsyncs the
 * folder, writes `latest` atomically (latest.tmp + fsync + rename + fsync
 * folder) holding the file NAME on one line; then, once every rank knows the
 * save is committed, rank 0, if keep > 0, deletes the committed
 * step_*.h5 files with a smaller step than this one beyond the newest `keep`
 * (this one counted; files with a larger step, e.g. from a run resumed from
 * an older checkpoint, are left alone) and stale step_*.h5.tmp files of
 * other steps. final_path (cap bytes) receives <dir>/step_XXXXXXXX.h5 on
 * every rank. *w is freed and set to NULL, whether or not commit succeeded;
 * after a failure the .tmp is removed if the rename has not happened. */
td_status td_ckpt_save_commit(td_ckpt_writer **w, int keep, char *final_path,
                              size_t cap);

/* Collective: abandon a save (on error): close the file and remove the
 * .tmp. When this rank failed alone (td_error_alone) it only forgets the
 * writer: the job is being aborted and the others would not join. Accepts
 * NULL / *w == NULL; sets *w = NULL. */
void td_ckpt_save_abort(td_ckpt_writer **w);

/* ---- loading ----------------------------------------------------------------- */

/* Resolve checkpoint.resume. Not collective.
 *   "never" -> *found = 0;
 *   "auto"  -> the file named by <dir>/latest (*found = 1), or *found = 0 if
 *              there is no `latest`;
 *   else    -> a PATH to a checkpoint file (*found = 1), or to a folder,
 *              which is resolved like "auto" on that folder but must hold
 *              a `latest`.
 * `latest` naming a missing file is TD_ERR_CKPT: "DIR/latest names
 * step_X.h5, which does not exist; the newest committed checkpoint in DIR is
 * step_Y.h5" (or "...; there is none"). A PATH that does not exist is
 * TD_ERR_CKPT too. path (cap bytes) receives the file's path. */
td_status td_ckpt_resolve(const char *dir, const char *resume, int *found,
                          char *path, size_t cap);

/* Collective on comm: open a checkpoint read-only with MPI-IO and check the
 * root attributes `format` == "trident-checkpoint" and `format_version` == 1.
 * A missing, truncated or non-HDF5 file, or one with another format, is
 * TD_ERR_CKPT naming the file. comm is duplicated. */
td_status td_ckpt_open(MPI_Comm comm, const char *path, td_ckpt_reader **out);
/* The open file (collective metadata reads through td_h5). */
hid_t td_ckpt_reader_file(td_ckpt_reader *r);
const char *td_ckpt_reader_path(td_ckpt_reader *r);

/* Collective: read this rank's boxes of tensor `path` into dst (boxes'
 * src_off/src_ld index dst). Checks that it exists ("FILE: tensor /model/x
 * is missing"), is floating point and has shape gshape ("FILE: tensor
 * /model/x has shape (a, b), expected (c, d)"). Boxes may overlap across
 * ranks (replicas read the same data). If verify (same value on every rank),
 * the checksum is computed over vboxes — boxes of dst already read, which
 * together over all ranks must cover the tensor exactly once (e.g. only one
 * replica passes its boxes, the others nvbox = 0) — and compared with the
 * stored `checksum`: a mismatch is TD_ERR_CKPT "FILE: tensor /model/x:
 * CHECKSUM MISMATCH (stored 0x..., computed 0x...)"; a missing checksum
 * attribute is TD_ERR_CKPT too. */
td_status td_ckpt_read_tensor(td_ckpt_reader *r, const char *path, int ndim,
                              const int64_t *gshape, int nbox,
                              const td_ckpt_box *boxes, float *dst, int verify,
                              int nvbox, const td_ckpt_box *vboxes);

/* Collective: close (only forgets the reader when this rank failed alone).
 * Accepts NULL / *r == NULL; sets *r = NULL. */
void td_ckpt_close(td_ckpt_reader **r);
/* Defer checksum verification (and failure agreement) of the following
 * td_ckpt_read_tensor calls to td_ckpt_read_finish: one reduction for all
 * tensors instead of one each. Same value on every rank. */
void td_ckpt_read_defer(td_ckpt_reader *r, int defer);
/* Verify every deferred tensor. Collective. A mismatch is TD_ERR_CKPT naming
 * the file and the tensor, the same on every rank. */
td_status td_ckpt_read_finish(td_ckpt_reader *r);

/* ---- inspection -------------------------------------------------------------- */

/* The checksum (as stored) of n contiguous elements whose global flat
 * indices are k0, k0+1, ...: a partial sum; sums of partial sums add mod
 * 2^64. For tests and tools. */
uint64_t td_ckpt_checksum(const float *x, int64_t n, int64_t k0);

/* Not collective (serial HDF5): open path and check its root attributes
 * (format, format_version, step, tokens_seen, saved_grid) as td_ckpt_open
 * does. TD_ERR_CKPT naming the file and the attribute, or saying the file
 * cannot be opened as HDF5 (no library internals in the message). */
td_status td_ckpt_check_file(const char *path);

/* Not collective (serial HDF5): print to out the step, tokens_seen,
 * saved_grid, trident_version, /config, and every dataset under /model and
 * /optim with its shape and "checksum ok" or "CHECKSUM MISMATCH (stored x,
 * computed y)" (or "no checksum"). Returns TD_ERR_CKPT if any checksum
 * mismatches or is missing, or the file is not a trident checkpoint. */
td_status td_ckpt_info(const char *path, FILE *out);

#endif
