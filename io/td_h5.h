/* td_h5.h — small HDF5 helpers: files, attributes, whole datasets, strings.
 *
 * Every failure returns a td_status (TD_ERR_HDF5, or TD_ERR_CKPT/TD_ERR_DATA
 * where the file is readable but not what was expected) whose message names
 * the file and the object and carries the innermost HDF5 error text.
 *
 * Files opened with comm != MPI_COMM_NULL use the MPI-IO driver; then every
 * call that creates or writes metadata (create, open, attribute writes,
 * td_h5_write_string, dataset creation) is collective on that comm and must
 * be given the same arguments on every rank, as HDF5 requires. td_h5_write
 * and td_h5_read are meant for serial files (one process). */
#ifndef TD_H5_H
#define TD_H5_H

#include <hdf5.h>
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "td_error.h"

/* Turn off HDF5's automatic error printing (errors come back as td_status)
 * and its clean-up at exit() (see td_h5.c). Call once per process before any
 * other HDF5 function; idempotent. */
void td_h5_init(void);
/* The innermost message(s) of the calling thread's HDF5 error stack as one
 * line, e.g. "H5Fopen: unable to open file: name = 'x.h5', errno = 2, ...".
 * Static buffer, overwritten by the next call. Call it right after the
 * failing HDF5 call: any later HDF5 call clears the stack. */
const char *td_h5_error_text(void);

/* Create (truncate) / open a file. comm == MPI_COMM_NULL: serial (sec2
 * driver); otherwise MPI-IO, collective on comm. File locking is used where
 * the file system supports it and skipped where it does not. */
td_status td_h5_create(const char *path, MPI_Comm comm, hid_t *out);
td_status td_h5_open(const char *path, MPI_Comm comm, int writable, hid_t *out);
/* td_h5_create for large parallel writes: objects (datasets) of at least
 * `threshold` bytes start at file addresses that are multiples of
 * `alignment` (H5Pset_alignment; alignment <= 1 leaves HDF5's default), and
 * `info` (MPI_INFO_NULL or MPI-IO hints such as romio_cb_write) is given to
 * the MPI-IO driver (ignored for a serial file). collective_metadata: the
 * metadata is written by collective MPI-IO calls (H5Pset_coll_metadata_write,
 * as td_h5_create does; fewer, larger requests for a parallel file system)
 * rather than by independent writes (no synchronisation of their own). */
td_status td_h5_create_aligned(const char *path, MPI_Comm comm, MPI_Info info,
                               size_t threshold, size_t alignment, int collective_metadata,
                               hid_t *out);
/* Close a file (or any object: group, dataset, ...); accepts negative ids and
 * sets *h to -1. Closing a file closes it fully (H5F_CLOSE_SEMI is not used). */
void td_h5_close(hid_t *h);

/* Whether a link `path` exists below loc (intermediate groups are checked
 * one by one, so "a/b/c" with no "a" answers 0, not an error). */
int td_h5_exists(hid_t loc, const char *path);

/* Attributes on loc (a file, group or dataset). An existing attribute of the
 * same name is replaced. Strings are variable-length UTF-8 (h5py reads them as
 * str); vectors are 1-D of length n >= 1. */
td_status td_h5_attr_write_i64(hid_t loc, const char *name, int64_t v);
td_status td_h5_attr_write_f64(hid_t loc, const char *name, double v);
td_status td_h5_attr_write_str(hid_t loc, const char *name, const char *v);
/* Unsigned 64-bit (H5T_STD_U64LE; numpy.uint64 in h5py), for checksums. */
td_status td_h5_attr_write_u64(hid_t loc, const char *name, uint64_t v);
td_status td_h5_attr_write_i64v(hid_t loc, const char *name, const int64_t *v,
                                int n);
td_status td_h5_attr_write_f64v(hid_t loc, const char *name, const double *v,
                                int n);
/* Read an attribute; `file` is only used in error messages. A missing
 * attribute, or one of the wrong class (an integer read from a float, a
 * string from a number) or size, is TD_ERR_HDF5 naming file, object and
 * attribute. i64 accepts any integer attribute; f64 accepts integer or float.
 * Strings may be fixed- or variable-length; one longer than cap-1 is an
 * error. Vectors must have exactly n elements. */
td_status td_h5_attr_read_i64(hid_t loc, const char *file, const char *name,
                              int64_t *v);
td_status td_h5_attr_read_f64(hid_t loc, const char *file, const char *name,
                              double *v);
td_status td_h5_attr_read_u64(hid_t loc, const char *file, const char *name,
                              uint64_t *v);
td_status td_h5_attr_read_str(hid_t loc, const char *file, const char *name,
                              char *buf, size_t cap);
td_status td_h5_attr_read_i64v(hid_t loc, const char *file, const char *name,
                               int64_t *v, int n);
td_status td_h5_attr_read_f64v(hid_t loc, const char *file, const char *name,
                               double *v, int n);

/* Write a whole dataset at `path` (intermediate groups created) from one
 * process. memtype e.g. H5T_NATIVE_FLOAT, H5T_NATIVE_INT32,
 * H5T_NATIVE_DOUBLE; stored as the same type, contiguous. ndim 0 writes a
 * scalar; dims has ndim entries (>= 0). An existing dataset at `path` is an
 * error. */
td_status td_h5_write(hid_t file, const char *path, hid_t memtype, int ndim,
                      const int64_t *dims, const void *data);
/* Read a whole dataset into data, converting to memtype. The rank and dims
 * must equal ndim/dims and the type class (integer or float) must match
 * memtype's; otherwise the error names file, dataset, expected vs found. */
td_status td_h5_read(hid_t file, const char *fname, const char *path,
                     hid_t memtype, int ndim, const int64_t *dims, void *data);
/* Dataset shape: *ndim (<= cap entries written to dims). */
td_status td_h5_shape(hid_t file, const char *fname, const char *path,
                      int *ndim, int64_t *dims, int cap);

/* A scalar string dataset holding `text` (intermediate groups created).
 * Stored as a fixed-length, NUL-terminated UTF-8 string of strlen(text)+1
 * bytes rather than a variable-length one, because parallel HDF5 cannot write
 * variable-length data to an MPI-IO file; h5dump and h5py read it the same.
 * On an MPI-IO file: collective, every rank passes the same text and
 * `writer` is nonzero on exactly one rank (it writes the bytes; the others
 * take part with nothing selected); on a serial file pass 1. */
td_status td_h5_write_string(hid_t file, const char *path, const char *text, int writer);
/* Read a scalar string dataset (fixed- or variable-length) into a new
 * NUL-terminated buffer; free with td_free. */
td_status td_h5_read_string(hid_t file, const char *fname, const char *path,
                            char **out);

#endif
