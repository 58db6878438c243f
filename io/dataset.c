/* dataset.c — token dataset readers (td_dataset.h): trident HDF5 through a
 * hyperslab per window, nanoGPT and llm.c .bin files through pread.
 *
 * A run reads its dataset for hours; the file must not change meanwhile.
 * HDF5 does not notice: reads past a truncated end return zeros (the sec2
 * driver fills them in), and chunks already in its cache keep their old
 * bytes. So every window read is followed by an fstat of the file opened at
 * the start: a different size or modification time ends the run with an
 * error naming the file and the window. (A file replaced by rename is a new
 * inode: the open one is unchanged and the run goes on with it.) */
#include "io/td_dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/td_h5.h"

#define LLMC_HEADER_INTS 256
#define LLMC_HEADER_BYTES (LLMC_HEADER_INTS * 4)
#define LLMC_MAGIC_GPT2 20240520 /* version 1: uint16 tokens */
#define LLMC_MAGIC_LLAMA3 20240801 /* version 7: uint32 tokens */

static const char HDF5_SIGNATURE[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};

struct td_dataset {
  char *path;
  const char *format;
  int64_t ntokens;
  int64_t vocab_size; /* the deck's */
  int fd; /* the file (kept open for HDF5 too: td_dataset_read_window checks it) */
  struct stat st; /* at open */
  /* .bin files */
  int64_t data_offset; /* bytes before token 0 */
  int token_bytes;     /* 2 or 4 */
  /* HDF5 */
  hid_t file, dset, fspace;
  int is_signed;
  const char *dname;
  hid_t mset;     /* the split's loss mask, or -1 */
  int64_t *docs;  /* the split's document starts, or NULL */
  int64_t ndocs;
};

static td_status open_meta(td_dataset *d, int val);

static uint32_t le32(const unsigned char *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
         (uint32_t)b[3] << 24;
}

/* Read exactly n bytes at offset, retrying short reads; *got = bytes read. */
static int pread_full(int fd, void *buf, size_t n, int64_t off, size_t *got) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(off + (int64_t)done));
    if (r < 0) {
      if (errno == EINTR) continue;
      *got = done;
      return -1;
    }
    if (r == 0) break;
    done += (size_t)r;
  }
  *got = done;
  return 0;
}

/* Turn a pending td_h5 error into TD_ERR_DATA with the same message. */
static td_status as_data_error(const char *extra) {
  char msg[1600];
  snprintf(msg, sizeof msg, "%s", td_error_message());
  td_error_clear();
  TD_FAIL(TD_ERR_DATA, "%s%s", msg, extra);
}

static td_status open_hdf5(td_dataset *d, td_split split) {
  td_status st = TD_OK;
  hid_t t = -1;
  const char *p = d->path;
  if (td_h5_open(p, MPI_COMM_NULL, 0, &d->file) != TD_OK)
    return as_data_error(" (a damaged HDF5 file?)");
  d->dname = "/tokens";
  if (split == TD_SPLIT_VAL && td_h5_exists(d->file, "/val_tokens"))
    d->dname = "/val_tokens";
  if (!td_h5_exists(d->file, d->dname))
    TD_FAIL(TD_ERR_DATA,
            "%s: HDF5 file has no %s dataset (not a trident token file; make "
            "one with `trident prepare`)",
            p, d->dname);
  d->dset = H5Dopen2(d->file, d->dname, H5P_DEFAULT);
  if (d->dset < 0)
    TD_FAIL(TD_ERR_DATA, "%s: cannot open dataset %s: %s", p, d->dname,
            td_h5_error_text());
  d->fspace = H5Dget_space(d->dset);
  t = H5Dget_type(d->dset);
  if (d->fspace < 0 || t < 0)
    TD_FAIL_GOTO(TD_ERR_DATA, "%s: cannot inspect dataset %s: %s", p, d->dname,
                 td_h5_error_text());
  int rank = H5Sget_simple_extent_ndims(d->fspace);
  H5T_class_t c = H5Tget_class(t);
  size_t size = H5Tget_size(t);
  if (c != H5T_INTEGER || size > 4 || size == 0) {
    TD_FAIL_GOTO(TD_ERR_DATA,
                 "%s: dataset %s holds %s of %zu bytes; expected integer tokens "
                 "(uint16 or uint32)",
                 p, d->dname,
                 c == H5T_FLOAT ? "floats" : c == H5T_INTEGER ? "integers" : "non-integers",
                 size);
  }
  if (rank != 1)
    TD_FAIL_GOTO(TD_ERR_DATA, "%s: dataset %s has rank %d; expected 1-D tokens",
                 p, d->dname, rank);
  d->is_signed = H5Tget_sign(t) == H5T_SGN_2;
  hsize_t n = 0;
  H5Sget_simple_extent_dims(d->fspace, &n, NULL);
  d->ntokens = (int64_t)n;
  if (d->ntokens == 0)
    TD_FAIL_GOTO(TD_ERR_DATA, "%s: dataset %s is empty (0 tokens)", p, d->dname);
  /* HDF5 sizes its read buffers by the storage the file's index claims: a
   * damaged index must not make it allocate more than the file could hold. */
  struct stat sb;
  hsize_t stored = H5Dget_storage_size(d->dset);
  if (stat(p, &sb) == 0 && stored > (hsize_t)sb.st_size)
    TD_FAIL_GOTO(TD_ERR_DATA,
                 "%s: dataset %s claims %llu bytes of storage but the file has %lld "
                 "(a damaged HDF5 file?)",
                 p, d->dname, (unsigned long long)stored, (long long)sb.st_size);
  /* Uncompressed tokens are all stored: dims that claim more (2^40 tokens in
   * a small file) would read fill values as tokens. */
  hid_t dcpl = H5Dget_create_plist(d->dset);
  int nfilters = dcpl < 0 ? 0 : H5Pget_nfilters(dcpl);
  if (dcpl >= 0) H5Pclose(dcpl);
  if (nfilters == 0 && (d->ntokens < 0 || stored / size < (hsize_t)d->ntokens))
    TD_FAIL_GOTO(TD_ERR_DATA,
                 "%s: dataset %s claims %llu tokens but stores %llu bytes of %zu-byte "
                 "tokens (truncated or damaged)",
                 p, d->dname, (unsigned long long)n, (unsigned long long)stored, size);
  if (H5Aexists(d->file, "vocab_size") > 0) {
    int64_t v = 0;
    if (td_h5_attr_read_i64(d->file, p, "vocab_size", &v) != TD_OK) {
      st = as_data_error("");
      goto done;
    }
    if (v < 1)
      TD_FAIL_GOTO(TD_ERR_DATA, "%s: the dataset's vocab_size attribute is %lld; expected >= 1",
                   p, (long long)v);
    if (v > d->vocab_size)
      TD_FAIL_GOTO(TD_ERR_DATA,
                   "%s: the dataset's vocab_size attribute is %lld but the "
                   "model's vocab_size is %lld",
                   p, (long long)v, (long long)d->vocab_size);
  }
  H5Eclear2(H5E_DEFAULT);
  TD_CHECK_GOTO(open_meta(d, split == TD_SPLIT_VAL && strcmp(d->dname, "/val_tokens") == 0));
  d->format = "trident-hdf5";
done:
  if (t >= 0) H5Tclose(t);
  return st;
}

/* The split's loss mask and document starts, when the file has them. */
static td_status open_meta(td_dataset *d, int val) {
  const char *p = d->path;
  char mname[32], dname[32];
  snprintf(mname, sizeof mname, "/%sloss_mask", val ? "val_" : "");
  snprintf(dname, sizeof dname, "/%sdocuments", val ? "val_" : "");
  if (td_h5_exists(d->file, mname)) {
    int64_t dims[1];
    int nd = 0;
    TD_CHECK(td_h5_shape(d->file, p, mname, &nd, dims, 1));
    if (nd != 1 || dims[0] != d->ntokens)
      TD_FAIL(TD_ERR_DATA, "%s: %s has %lld entries; expected one per token of %s (%lld)", p,
              mname, nd == 1 ? (long long)dims[0] : -1LL, d->dname, (long long)d->ntokens);
    d->mset = H5Dopen2(d->file, mname, H5P_DEFAULT);
    hid_t t = d->mset < 0 ? -1 : H5Dget_type(d->mset);
    int okt = t >= 0 && H5Tget_class(t) == H5T_INTEGER;
    if (t >= 0) H5Tclose(t);
    if (!okt) TD_FAIL(TD_ERR_DATA, "%s: %s is not an integer dataset", p, mname);
  }
  if (td_h5_exists(d->file, dname)) {
    int64_t dims[1];
    int nd = 0;
    TD_CHECK(td_h5_shape(d->file, p, dname, &nd, dims, 1));
    if (nd != 1 || dims[0] < 1 || dims[0] > d->ntokens)
      TD_FAIL(TD_ERR_DATA, "%s: %s has %lld entries; expected 1 to %lld document starts", p,
              dname, nd == 1 ? (long long)dims[0] : -1LL, (long long)d->ntokens);
    TD_CHECK(td_alloc((void **)&d->docs, (size_t)dims[0] * sizeof *d->docs, "document starts"));
    TD_CHECK(td_h5_read(d->file, p, dname, H5T_NATIVE_INT64, 1, dims, d->docs));
    d->ndocs = dims[0];
    for (int64_t k = 0; k < d->ndocs; k++)
      if ((k == 0 && d->docs[0] != 0) || (k > 0 && d->docs[k] <= d->docs[k - 1]) ||
          d->docs[k] >= d->ntokens)
        TD_FAIL(TD_ERR_DATA, "%s: %s[%lld] is %lld: document starts must begin at 0 and "
                "increase, below %lld", p, dname, (long long)k, (long long)d->docs[k],
                (long long)d->ntokens);
  }
  return TD_OK;
}

int td_dataset_has_mask(const td_dataset *d) { return d->mset >= 0; }

int td_dataset_has_documents(const td_dataset *d) { return d->docs != NULL; }

td_status td_dataset_read_meta(td_dataset *d, int64_t i, int64_t T, uint8_t *mask,
                               int32_t *doc) {
  int64_t nw = td_dataset_nwindows(d, T);
  TD_REQUIRE(i >= 0 && i < nw, TD_ERR_INTERNAL, "%s: window %lld out of range [0, %lld)",
             d->path, (long long)i, (long long)nw);
  int64_t first = i * T, n = T + 1;
  if (mask && d->mset < 0) memset(mask, 1, (size_t)n);
  if (mask && d->mset >= 0) {
    hsize_t start = (hsize_t)first, count = (hsize_t)n;
    hid_t fs = H5Dget_space(d->mset), ms = H5Screate_simple(1, &count, NULL);
    herr_t e = fs < 0 || ms < 0 ? -1
               : H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL);
    if (e >= 0) e = H5Dread(d->mset, H5T_NATIVE_UINT8, ms, fs, H5P_DEFAULT, mask);
    const char *why = e < 0 ? td_h5_error_text() : NULL;
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (e < 0)
      TD_FAIL(TD_ERR_DATA, "%s: window %lld: cannot read the loss mask [%lld, %lld): %s",
              d->path, (long long)i, (long long)first, (long long)(first + n), why);
    for (int64_t k = 0; k < n; k++) mask[k] = mask[k] != 0;
  }
  if (doc) {
    /* the last document start at or before the window's first token */
    int64_t lo = 0, hi = d->ndocs; /* docs[lo] <= first < docs[hi] */
    while (d->docs && hi - lo > 1) {
      int64_t mid = (lo + hi) / 2;
      if (d->docs[mid] <= first) lo = mid;
      else hi = mid;
    }
    int32_t cur = 0;
    int64_t next = d->docs ? lo + 1 : 0;
    for (int64_t k = 0; k < n; k++) {
      while (d->docs && next < d->ndocs && d->docs[next] <= first + k) cur = (int32_t)(d->docs[next++] - first);
      doc[k] = cur;
    }
  }
  return TD_OK;
}

static td_status open_bin(td_dataset *d, const unsigned char *head, size_t nhead,
                          int64_t fsize) {
  const char *p = d->path;
  uint32_t magic = nhead >= 4 ? le32(head) : 0;
  if (magic == LLMC_MAGIC_GPT2 || magic == LLMC_MAGIC_LLAMA3) {
    unsigned char hdr[LLMC_HEADER_BYTES];
    size_t got = 0;
    if (fsize < LLMC_HEADER_BYTES || pread_full(d->fd, hdr, sizeof hdr, 0, &got) != 0 ||
        got != sizeof hdr)
      TD_FAIL(TD_ERR_DATA,
              "%s: llm.c token file truncated: %lld bytes, shorter than its "
              "%d-byte header",
              p, (long long)fsize, LLMC_HEADER_BYTES);
    int32_t version = (int32_t)le32(hdr + 4);
    int32_t count = (int32_t)le32(hdr + 8);
    int want_version = magic == LLMC_MAGIC_GPT2 ? 1 : 7;
    if (version != want_version)
      TD_FAIL(TD_ERR_DATA,
              "%s: llm.c token file with magic %u has version %d; expected %d "
              "(%s tokens)",
              p, magic, version, want_version,
              magic == LLMC_MAGIC_GPT2 ? "GPT-2 uint16" : "LLaMA-3 uint32");
    if (count < 0)
      TD_FAIL(TD_ERR_DATA, "%s: llm.c header gives a negative token count %d", p,
              count);
    d->token_bytes = magic == LLMC_MAGIC_GPT2 ? 2 : 4;
    d->data_offset = LLMC_HEADER_BYTES;
    int64_t want = LLMC_HEADER_BYTES + (int64_t)count * d->token_bytes;
    if (fsize < want)
      TD_FAIL(TD_ERR_DATA,
              "%s: llm.c token file truncated: header says %d tokens (%lld "
              "bytes) but the file has %lld bytes",
              p, count, (long long)want, (long long)fsize);
    if (fsize > want)
      TD_FAIL(TD_ERR_DATA,
              "%s: llm.c token file has %lld bytes but its header says %d "
              "tokens (%lld bytes)",
              p, (long long)fsize, count, (long long)want);
    if (count == 0) TD_FAIL(TD_ERR_DATA, "%s: llm.c token file has 0 tokens", p);
    d->ntokens = count;
    d->format = "llmc-bin";
    return TD_OK;
  }
  if (fsize % 2 != 0)
    TD_FAIL(TD_ERR_DATA,
            "%s: %lld bytes, an odd count: not a flat uint16 token file "
            "(truncated?), nor an HDF5 or llm.c one",
            p, (long long)fsize);
  d->token_bytes = 2;
  d->data_offset = 0;
  d->ntokens = fsize / 2;
  d->format = "nanogpt-bin";
  return TD_OK;
}

td_status td_dataset_open(const char *path, td_split split, int64_t vocab_size,
                          td_dataset **out) {
  td_status st = TD_OK;
  td_dataset *d = NULL;
  *out = NULL;
  TD_REQUIRE(path && path[0], TD_ERR_USAGE, "no dataset path given");
  TD_REQUIRE(vocab_size > 0, TD_ERR_INTERNAL, "vocab_size %lld < 1",
             (long long)vocab_size);
  TD_CHECK(td_alloc((void **)&d, sizeof *d, "dataset"));
  d->fd = -1;
  d->file = d->dset = d->fspace = d->mset = -1;
  d->vocab_size = vocab_size;
  size_t plen = strlen(path);
  TD_CHECK_GOTO(td_alloc((void **)&d->path, plen + 1, "dataset path"));
  memcpy(d->path, path, plen + 1);

  d->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (d->fd < 0)
    TD_FAIL_GOTO(TD_ERR_DATA, "%s: cannot open dataset: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(d->fd, &sb) != 0)
    TD_FAIL_GOTO(TD_ERR_DATA, "%s: cannot stat dataset: %s", path, strerror(errno));
  if (S_ISDIR(sb.st_mode))
    TD_FAIL_GOTO(TD_ERR_DATA, "%s: is a directory, not a token file", path);
  if (sb.st_size == 0) TD_FAIL_GOTO(TD_ERR_DATA, "%s: empty file", path);
  unsigned char head[8];
  size_t nhead = 0;
  if (pread_full(d->fd, head, sizeof head, 0, &nhead) != 0)
    TD_FAIL_GOTO(TD_ERR_DATA, "%s: cannot read: %s", path, strerror(errno));
  d->st = sb;
  if (nhead == sizeof head && memcmp(head, HDF5_SIGNATURE, sizeof head) == 0) {
    TD_CHECK_GOTO(open_hdf5(d, split));
  } else {
    TD_CHECK_GOTO(open_bin(d, head, nhead, (int64_t)sb.st_size));
  }
  *out = d;
  d = NULL;
done:
  td_dataset_close(&d);
  return st;
}

int64_t td_dataset_ntokens(const td_dataset *d) { return d->ntokens; }
const char *td_dataset_format(const td_dataset *d) { return d->format; }
const char *td_dataset_path(const td_dataset *d) { return d->path; }

int64_t td_dataset_nwindows(const td_dataset *d, int64_t T) {
  if (T < 1 || d->ntokens < 2) return 0;
  return (d->ntokens - 1) / T;
}

/* Check the n tokens of window i in out (token `first` first) against the
 * vocab. */
static td_status check_tokens(const td_dataset *d, int64_t i, const int32_t *out, int64_t n,
                              int64_t first, int is_unsigned) {
  for (int64_t k = 0; k < n; ++k) {
    int64_t v = is_unsigned ? (int64_t)(uint32_t)out[k] : (int64_t)out[k];
    if (v < 0 || v >= d->vocab_size)
      TD_FAIL(TD_ERR_DATA,
              "%s: window %lld: token %lld (of %s) is %lld, outside the vocabulary "
              "[0, %lld)",
              d->path, (long long)i, (long long)(first + k),
              d->dname ? d->dname : "the file", (long long)v,
              (long long)d->vocab_size);
  }
  return TD_OK;
}

/* After reading window i: the file must be the one opened (size and
 * modification time unchanged; see the file comment). */
static td_status check_unchanged(const td_dataset *d, int64_t i, int64_t first, int64_t n) {
  struct stat now;
  if (fstat(d->fd, &now) != 0)
    TD_FAIL(TD_ERR_IO, "%s: window %lld (tokens [%lld, %lld)): cannot stat the file: %s",
            d->path, (long long)i, (long long)first, (long long)(first + n), strerror(errno));
  if (now.st_size != d->st.st_size || now.st_mtim.tv_sec != d->st.st_mtim.tv_sec ||
      now.st_mtim.tv_nsec != d->st.st_mtim.tv_nsec)
    TD_FAIL(TD_ERR_DATA,
            "%s: window %lld (tokens [%lld, %lld)%s%s): the file changed while this run "
            "reads it (%lld bytes at the start, %lld now%s); a dataset must stay as it is "
            "for the whole run",
            d->path, (long long)i, (long long)first, (long long)(first + n),
            d->dname ? " of " : "", d->dname ? d->dname : "", (long long)d->st.st_size,
            (long long)now.st_size,
            now.st_size == d->st.st_size ? ", modified since" : "");
  return TD_OK;
}

td_status td_dataset_read_window(td_dataset *d, int64_t i, int64_t T,
                                 int32_t *out) {
  int64_t nw = td_dataset_nwindows(d, T);
  TD_REQUIRE(i >= 0 && i < nw, TD_ERR_INTERNAL,
             "%s: window %lld out of range [0, %lld) for T = %lld", d->path,
             (long long)i, (long long)nw, (long long)T);
  int64_t first = i * T, n = T + 1;
  if (d->dset >= 0) {
    hsize_t start = (hsize_t)first, count = (hsize_t)n;
    hid_t mspace = H5Screate_simple(1, &count, NULL);
    herr_t e = mspace < 0 ? -1
               : H5Sselect_hyperslab(d->fspace, H5S_SELECT_SET, &start, NULL,
                                     &count, NULL);
    if (e >= 0)
      e = H5Dread(d->dset, d->is_signed ? H5T_NATIVE_INT32 : H5T_NATIVE_UINT32,
                  mspace, d->fspace, H5P_DEFAULT, out);
    const char *why = e < 0 ? td_h5_error_text() : NULL;
    if (mspace >= 0) H5Sclose(mspace);
    /* a changed file explains a failed read better than HDF5's text */
    TD_CHECK(check_unchanged(d, i, first, n));
    if (e < 0)
      TD_FAIL(TD_ERR_DATA, "%s: window %lld: cannot read tokens [%lld, %lld) of %s: %s",
              d->path, (long long)i, (long long)first, (long long)(first + n), d->dname, why);
    TD_CHECK(check_tokens(d, i, out, n, first, !d->is_signed));
    return TD_OK;
  }
  /* .bin: read the raw little-endian tokens into the front of out, then widen
   * from the back so no token is overwritten before it is read. */
  size_t bytes = (size_t)n * (size_t)d->token_bytes, got = 0;
  unsigned char *raw = (unsigned char *)out;
  if (pread_full(d->fd, raw, bytes, d->data_offset + first * d->token_bytes, &got) != 0)
    TD_FAIL(TD_ERR_IO, "%s: window %lld: cannot read tokens [%lld, %lld): %s", d->path,
            (long long)i, (long long)first, (long long)(first + n), strerror(errno));
  TD_CHECK(check_unchanged(d, i, first, n));
  if (got != bytes)
    TD_FAIL(TD_ERR_DATA, "%s: window %lld: file shrank: tokens [%lld, %lld) are not there",
            d->path, (long long)i, (long long)first, (long long)(first + n));
  if (d->token_bytes == 2) {
    for (int64_t k = n - 1; k >= 0; --k) {
      uint32_t v = (uint32_t)raw[2 * k] | (uint32_t)raw[2 * k + 1] << 8;
      memcpy(raw + 4 * k, &v, 4);
    }
  } else {
    for (int64_t k = 0; k < n; ++k) {
      uint32_t v = le32(raw + 4 * k);
      memcpy(raw + 4 * k, &v, 4);
    }
  }
  TD_CHECK(check_tokens(d, i, out, n, first, 1));
  return TD_OK;
}

td_status td_dataset_require_windows(const td_dataset *d, int64_t T,
                                     int64_t needed, const char *what) {
  int64_t w = td_dataset_nwindows(d, T);
  if (w < needed)
    TD_FAIL(TD_ERR_DATA,
            "%s (%s): %lld tokens give %lld windows of %lld tokens; one global "
            "batch needs %lld",
            d->path, what ? what : "dataset", (long long)d->ntokens,
            (long long)w, (long long)(T + 1), (long long)needed);
  return TD_OK;
}

void td_dataset_close(td_dataset **pd) {
  if (!pd || !*pd) return;
  td_dataset *d = *pd;
  if (d->fd >= 0) close(d->fd);
  td_h5_close(&d->fspace);
  td_h5_close(&d->mset);
  td_free(d->docs);
  td_h5_close(&d->dset);
  td_h5_close(&d->file);
  td_free(d->path);
  td_free(d);
  *pd = NULL;
}
