/* prepare.c — text files and folders → trident HDF5 token dataset, streamed
 * through a bounded buffer (td_prepare.h). */
#include "io/td_prepare.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/td_bpe.h"
#include "io/prepare_internal.h"
#include "io/td_h5.h"
#include "io/td_tokenizer_h5.h"
#include "parallel/td_mpi.h"
#include "td_log.h"

#define TD_PREPARE_CHUNK_TOKENS 32768 /* HDF5 chunk: 64 KiB of uint16 */
#define TD_PREPARE_MIN_BUFFER 48
#define TD_PREPARE_MAX_DEPTH 256

/* One file to read, in order. */
typedef struct {
  char *path;   /* shown in messages; "<stdin>" for "-" */
  int64_t size; /* bytes expected */
  int spool_fd; /* >= 0: an unlinked spool file holding the bytes */
} src;

typedef struct {
  src *v;
  int64_t n, cap;
  int have_out;       /* out_path exists: skip it if met in a folder */
  dev_t out_dev;
  ino_t out_ino;
  const char *out_path;
  unsigned char *buf; /* read buffer (buffer_bytes/3) */
  size_t buf_bytes;
  FILE *log;
} plan;

static void logf_(FILE *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(FILE *log, const char *fmt, ...) {
  if (!log) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(log, fmt, ap);
  va_end(ap);
}

static char *dup_str(const char *s) {
  size_t n = strlen(s);
  char *d = malloc(n + 1);
  if (d) memcpy(d, s, n + 1);
  return d;
}

static td_status plan_add(plan *p, const char *path, int64_t size, int spool_fd) {
  if (p->n == p->cap) {
    int64_t cap = p->cap ? 2 * p->cap : 64;
    src *v = realloc(p->v, (size_t)cap * sizeof *v);
    if (!v) TD_FAIL(TD_ERR_NOMEM, "out of memory listing input files (%s)", path);
    p->v = v;
    p->cap = cap;
  }
  char *d = dup_str(path);
  if (!d) TD_FAIL(TD_ERR_NOMEM, "out of memory listing input files (%s)", path);
  p->v[p->n++] = (src){d, size, spool_fd};
  return TD_OK;
}

static void plan_free(plan *p) {
  for (int64_t i = 0; i < p->n; ++i) {
    free(p->v[i].path);
    if (p->v[i].spool_fd >= 0) close(p->v[i].spool_fd);
  }
  free(p->v);
  p->v = NULL;
  p->n = p->cap = 0;
}

static int write_full(int fd, const void *buf, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = write(fd, (const char *)buf + done, n - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    done += (size_t)w;
  }
  return 0;
}

/* Copy everything readable from in_fd into an unlinked temporary file next to
 * the output, and add it to the plan. */
static td_status spool(plan *p, int in_fd, const char *name, int64_t *bytes) {
  td_status st = TD_OK;
  size_t n = strlen(p->out_path);
  char *tmpl = malloc(n + 16);
  int fd = -1;
  if (!tmpl) TD_FAIL(TD_ERR_NOMEM, "out of memory spooling %s", name);
  memcpy(tmpl, p->out_path, n);
  memcpy(tmpl + n, ".spool.XXXXXX", 14);
  fd = mkstemp(tmpl);
  if (fd < 0)
    TD_FAIL_GOTO(TD_ERR_IO, "%s: cannot create a spool file %s for %s: %s",
                 p->out_path, tmpl, name, strerror(errno));
  unlink(tmpl);
  int64_t total = 0;
  for (;;) {
    ssize_t r = read(in_fd, p->buf, p->buf_bytes);
    if (r < 0) {
      if (errno == EINTR) continue;
      TD_FAIL_GOTO(TD_ERR_IO, "%s: read failed: %s", name, strerror(errno));
    }
    if (r == 0) break;
    if (write_full(fd, p->buf, (size_t)r) != 0)
      TD_FAIL_GOTO(TD_ERR_IO, "%s: cannot spool %s to %s: %s", p->out_path,
                   name, tmpl, strerror(errno));
    total += r;
  }
  TD_CHECK_GOTO(plan_add(p, name, total, fd));
  fd = -1;
  *bytes = total;
done:
  if (fd >= 0) close(fd);
  free(tmpl);
  return st;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Add the regular files below folder `dir`, sorted by name, recursively. */
static td_status walk(plan *p, const char *dir, int depth, int64_t *files,
                      int64_t *bytes) {
  td_status st = TD_OK;
  DIR *dh = NULL;
  char **names = NULL;
  int64_t nn = 0, cap = 0;
  char *child = NULL;
  if (depth > TD_PREPARE_MAX_DEPTH)
    TD_FAIL(TD_ERR_IO, "%s: folders nested deeper than %d", dir,
            TD_PREPARE_MAX_DEPTH);
  dh = opendir(dir);
  if (!dh) TD_FAIL(TD_ERR_IO, "%s: cannot read folder: %s", dir, strerror(errno));
  for (;;) {
    errno = 0;
    struct dirent *e = readdir(dh);
    if (!e) {
      if (errno)
        TD_FAIL_GOTO(TD_ERR_IO, "%s: cannot read folder: %s", dir, strerror(errno));
      break;
    }
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (nn == cap) {
      cap = cap ? 2 * cap : 32;
      char **v = realloc(names, (size_t)cap * sizeof *v);
      if (!v) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory listing %s", dir);
      names = v;
    }
    if (!(names[nn] = dup_str(e->d_name)))
      TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory listing %s", dir);
    nn++;
  }
  if (nn > 1) qsort(names, (size_t)nn, sizeof *names, cmp_name);
  size_t dl = strlen(dir);
  int slash = dl > 0 && dir[dl - 1] == '/';
  for (int64_t i = 0; i < nn; ++i) {
    free(child);
    size_t cl = dl + 1 + strlen(names[i]) + 1;
    if (!(child = malloc(cl))) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory (%s)", dir);
    snprintf(child, cl, "%s%s%s", dir, slash ? "" : "/", names[i]);
    struct stat ls, sb;
    if (lstat(child, &ls) != 0 || stat(child, &sb) != 0)
      TD_FAIL_GOTO(TD_ERR_IO, "%s: cannot read: %s", child, strerror(errno));
    if (p->have_out && sb.st_dev == p->out_dev && sb.st_ino == p->out_ino) {
      logf_(p->log, "prepare:   skipping %s (the output file)\n", child);
      continue;
    }
    if (S_ISDIR(sb.st_mode)) {
      if (S_ISLNK(ls.st_mode)) {
        logf_(p->log, "prepare:   skipping %s (a link to a folder)\n", child);
        continue;
      }
      TD_CHECK_GOTO(walk(p, child, depth + 1, files, bytes));
    } else if (S_ISREG(sb.st_mode)) {
      if (access(child, R_OK) != 0)
        TD_FAIL_GOTO(TD_ERR_IO, "%s: cannot read: %s", child, strerror(errno));
      TD_CHECK_GOTO(plan_add(p, child, (int64_t)sb.st_size, -1));
      (*files)++;
      *bytes += (int64_t)sb.st_size;
    } else {
      logf_(p->log, "prepare:   skipping %s (not a regular file)\n", child);
    }
  }
done:
  free(child);
  for (int64_t i = 0; i < nn; ++i) free(names[i]);
  free(names);
  if (dh) closedir(dh);
  return st;
}

/* Add one command-line input to the plan and log it. */
static td_status add_input(plan *p, const char *in) {
  int64_t files = 0, bytes = 0;
  if (!strcmp(in, "-")) {
    TD_CHECK(spool(p, STDIN_FILENO, "<stdin>", &bytes));
    logf_(p->log, "prepare: input <stdin>: %lld bytes\n", (long long)bytes);
    return TD_OK;
  }
  struct stat sb;
  if (stat(in, &sb) != 0) TD_FAIL(TD_ERR_IO, "%s: cannot read: %s", in, strerror(errno));
  if (S_ISDIR(sb.st_mode)) {
    TD_CHECK(walk(p, in, 0, &files, &bytes));
    logf_(p->log, "prepare: input %s: folder, %lld files, %lld bytes\n", in,
          (long long)files, (long long)bytes);
    return TD_OK;
  }
  int fd = open(in, O_RDONLY | O_CLOEXEC);
  if (fd < 0) TD_FAIL(TD_ERR_IO, "%s: cannot read: %s", in, strerror(errno));
  td_status st = TD_OK;
  if (S_ISREG(sb.st_mode)) {
    close(fd);
    TD_CHECK(plan_add(p, in, (int64_t)sb.st_size, -1));
    bytes = (int64_t)sb.st_size;
  } else {
    st = spool(p, fd, in, &bytes); /* a pipe or device: learn its length */
    close(fd);
    TD_CHECK(st);
  }
  logf_(p->log, "prepare: input %s: %lld bytes\n", in, (long long)bytes);
  return TD_OK;
}

/* A 1-D dataset of n tokens, chunked: uint16, or uint32 when `wide` (a
 * vocabulary over 65,536 tokens, LLaMA 3's). */
static td_status create_tokens(hid_t f, const char *tmp, const char *name,
                               int64_t n, int wide, hid_t *out) {
  td_status st = TD_OK;
  hsize_t dim = (hsize_t)n;
  hsize_t chunk = n < TD_PREPARE_CHUNK_TOKENS ? (hsize_t)n : TD_PREPARE_CHUNK_TOKENS;
  hid_t space = H5Screate_simple(1, &dim, NULL);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  /* every token is written: no fill values first (a parallel file would
   * write them all at creation) */
  if (space < 0 || dcpl < 0 || H5Pset_chunk(dcpl, 1, &chunk) < 0 ||
      H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot set up %s: %s", tmp, name,
                 td_h5_error_text());
  *out = H5Dcreate2(f, name, wide ? H5T_STD_U32LE : H5T_STD_U16LE, space, H5P_DEFAULT, dcpl,
                    H5P_DEFAULT);
  if (*out < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot create %s: %s", tmp, name,
                 td_h5_error_text());
done:
  if (dcpl >= 0) H5Pclose(dcpl);
  if (space >= 0) H5Sclose(space);
  return st;
}

/* Write n tokens (of memory type mt) at offset `at` of dataset d. */
static td_status write_tokens(hid_t d, const char *tmp, const char *name,
                              int64_t at, hid_t mt, const void *tok, int64_t n) {
  hsize_t start = (hsize_t)at, count = (hsize_t)n;
  hid_t fs = H5Dget_space(d);
  hid_t ms = H5Screate_simple(1, &count, NULL);
  herr_t e = (fs < 0 || ms < 0) ? -1
             : H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL);
  if (e >= 0) e = H5Dwrite(d, mt, ms, fs, H5P_DEFAULT, tok);
  const char *why = e < 0 ? td_h5_error_text() : NULL;
  if (ms >= 0) H5Sclose(ms);
  if (fs >= 0) H5Sclose(fs);
  if (e < 0)
    TD_FAIL(TD_ERR_HDF5, "%s: cannot write tokens [%lld, %lld) of %s: %s", tmp,
            (long long)at, (long long)(at + n), name, why);
  return TD_OK;
}

/* ---- GPT-2 BPE, the input split across the ranks -------------------------------- */

/* Text t may be cut before t[c]: t[c-1] is a '\n' that follows a printable
 * ASCII character and precedes one. That '\n' is a pre-token of its own
 * whether the text goes on or ends there (\s+(?!\S), then \s+), and the next
 * pre-token starts after it either way, so encoding the two parts apart gives
 * the ids of the whole (td_bpe.h, pre-tokenization). A file's start is a cut
 * too (each file is its own document). */
static int cut_at(const unsigned char *t, size_t c) {
  return c >= 2 && t[c - 1] == '\n' && t[c - 2] > 0x20 && t[c - 2] < 0x7F && t[c] > 0x20 &&
         t[c] < 0x7F;
}

/* The last cut in t[0, n), or 0 when there is none. */
static size_t bpe_cut(const unsigned char *t, size_t n) {
  for (size_t c = n > 0 ? n - 1 : 0; c >= 2; --c)
    if (cut_at(t, c)) return c;
  return 0;
}

/* What one rank does: its bytes [lo, hi) of the concatenated inputs (file i
 * at [fstart[i], fstart[i+1])), tokenized into an unlinked spool file. */
typedef struct {
  td_bpe *b;
  int32_t bos, eos; /* around each document (td_bpe_doc_tokens); -1: none */
  const int64_t *fstart;
  int64_t lo, hi, total;
  int last;        /* the last rank: also the empty files at the very end */
  int spool;       /* fd */
  int64_t ntok;    /* tokens in the spool */
  unsigned char *text;
  size_t cap;
  int32_t *ids;
  size_t nids, idcap;
  uint32_t *tok;   /* spooled as uint32, whatever the dataset's width */
  size_t tokcap;
  int64_t done;    /* bytes encoded */
  double t0, last_log;
  int64_t *docs;   /* where this rank's documents start, in its spool's tokens */
  int64_t ndocs, doccap;
} bpe_job;

/* A source's descriptor: its spool or the file opened (*own: close it). */
static td_status src_open(const src *s, int *fd, int *own) {
  *own = s->spool_fd < 0;
  *fd = *own ? open(s->path, O_RDONLY | O_CLOEXEC) : s->spool_fd;
  if (*fd < 0) TD_FAIL(TD_ERR_IO, "%s: cannot read: %s", s->path, strerror(errno));
  return TD_OK;
}

/* Read exactly n bytes at off of source s, else fail naming it. */
static td_status src_pread(const src *s, int fd, void *buf, size_t n, int64_t off) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + (int64_t)got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) TD_FAIL(TD_ERR_IO, "%s: read failed: %s", s->path, strerror(errno));
    if (r == 0)
      TD_FAIL(TD_ERR_IO, "%s: shrank while being read (was %lld bytes, ends at %lld)", s->path,
              (long long)s->size, (long long)(off + (int64_t)got));
    got += (size_t)r;
  }
  return TD_OK;
}

/* The first place at or after byte x of the concatenation where the ranks'
 * shares may meet: x itself at a file's start, else the first cut inside x's
 * file, else the next file's start (fstart[n] = total when x >= total). */
static td_status first_cut(plan *p, const int64_t *fstart, int64_t x, int64_t *out) {
  *out = fstart[p->n];
  if (x >= *out) return TD_OK;
  int64_t i = 0;
  while (fstart[i + 1] <= x) ++i;
  *out = fstart[i + 1];
  if (x == fstart[i]) {
    *out = x;
    return TD_OK;
  }
  const src *s = &p->v[i];
  int fd = -1, own = 0;
  td_status st = TD_OK;
  TD_CHECK(src_open(s, &fd, &own));
  int64_t off = x - fstart[i], pos = off - 2 > 0 ? off - 2 : 0;
  for (;;) {
    size_t n = s->size - pos < (int64_t)p->buf_bytes ? (size_t)(s->size - pos) : p->buf_bytes;
    TD_CHECK_GOTO(src_pread(s, fd, p->buf, n, pos));
    for (size_t j = 2; j < n; ++j)
      if (pos + (int64_t)j >= off && cut_at(p->buf, j)) {
        *out = fstart[i] + pos + (int64_t)j;
        goto done;
      }
    if (pos + (int64_t)n >= s->size) break; /* no cut: the next file's start */
    pos += (int64_t)n - 2;                  /* buf_bytes >= 16: progress */
  }
done:
  if (own) close(fd);
  return st;
}

/* Append the pending ids to the spool. */
static td_status job_flush(bpe_job *j, const char *spool_name) {
  if (j->nids > j->tokcap) {
    td_free(j->tok);
    j->tok = NULL, j->tokcap = 0;
    TD_CHECK(td_alloc((void **)&j->tok, 2 * j->nids * sizeof *j->tok, "prepare token buffer"));
    j->tokcap = 2 * j->nids;
  }
  for (size_t i = 0; i < j->nids; ++i) j->tok[i] = (uint32_t)j->ids[i];
  if (write_full(j->spool, j->tok, j->nids * sizeof *j->tok) != 0)
    TD_FAIL(TD_ERR_IO, "%s: cannot write tokens: %s", spool_name, strerror(errno));
  j->ntok += (int64_t)j->nids;
  j->nids = 0;
  return TD_OK;
}

/* Append one id to the pending ones. */
static td_status job_id(bpe_job *j, int32_t id) {
  if (j->nids == j->idcap) {
    size_t cap = j->idcap ? 2 * j->idcap : 1024;
    int32_t *g = realloc(j->ids, cap * sizeof *g);
    if (!g) TD_FAIL(TD_ERR_NOMEM, "prepare: out of memory for token ids");
    j->ids = g, j->idcap = cap;
  }
  j->ids[j->nids++] = id;
  return TD_OK;
}

/* Encode bytes [a, e) of file i (with the document's first token when `doc`
 * starts there, and its last when `ends` there) into the spool, in pieces
 * cut by bpe_cut. */
static td_status job_piece(bpe_job *j, plan *p, int64_t i, int64_t a, int64_t e, int doc,
                           int ends, const char *spool_name) {
  const src *s = &p->v[i];
  if (doc) { /* a document starts here: its first token's place in the spool */
    if (j->ndocs == j->doccap) {
      int64_t cap = j->doccap ? 2 * j->doccap : 256;
      int64_t *g = realloc(j->docs, (size_t)cap * sizeof *g);
      if (!g) TD_FAIL(TD_ERR_NOMEM, "prepare: out of memory for document starts");
      j->docs = g, j->doccap = cap;
    }
    j->docs[j->ndocs++] = j->ntok + (int64_t)j->nids;
  }
  if (doc && j->bos >= 0) TD_CHECK(job_id(j, j->bos));
  if (a < e) {
    int fd = -1, own = 0;
    td_status st = TD_OK;
    size_t len = 0;
    TD_CHECK(src_open(s, &fd, &own));
    for (int64_t pos = a; pos < e || len > 0;) {
      if (len == j->cap) { /* no cut in the whole buffer (one very long line): grow */
        unsigned char *g = realloc(j->text, 2 * j->cap);
        if (!g) TD_FAIL_GOTO(TD_ERR_NOMEM, "%s: out of memory for a %zu-byte line", s->path, j->cap);
        j->text = g, j->cap *= 2;
      }
      size_t r = e - pos < (int64_t)(j->cap - len) ? (size_t)(e - pos) : j->cap - len;
      TD_CHECK_GOTO(src_pread(s, fd, j->text + len, r, pos));
      pos += (int64_t)r, len += r;
      size_t cut = pos == e ? len : bpe_cut(j->text, len);
      if (cut == 0) continue;
      TD_CHECK_GOTO(td_bpe_encode(j->b, j->text, cut, &j->ids, &j->nids, &j->idcap));
      TD_CHECK_GOTO(job_flush(j, spool_name));
      memmove(j->text, j->text + cut, len - cut);
      len -= cut;
      j->done += (int64_t)cut;
      double now = td_now();
      if (now - j->last_log >= 5.0 && p->log) { /* a progress line on long inputs */
        double rate = (double)j->done / (now - j->t0);
        int64_t mine = j->hi - j->lo;
        logf_(p->log, "prepare: %.1f of %.1f MB%s, %lld tokens, %.1f MB/s, ETA %.0f s\n",
              j->done / 1e6, mine / 1e6, mine < j->total ? " (rank 0's share)" : "",
              (long long)j->ntok, rate / 1e6, rate > 0 ? (double)(mine - j->done) / rate : 0.0);
        fflush(p->log);
        j->last_log = now;
      }
    }
    struct stat sb;
    if (fstat(fd, &sb) == 0 && (int64_t)sb.st_size != s->size && own)
      st = td_error_set(TD_ERR_IO, __FILE__, __LINE__, __func__,
                        "%s: changed size while being read (%lld bytes, was %lld)", s->path,
                        (long long)sb.st_size, (long long)s->size);
  done:
    if (own) close(fd);
    TD_CHECK(st);
  }
  if (ends && j->eos >= 0) TD_CHECK(job_id(j, j->eos));
  return job_flush(j, spool_name);
}

/* This rank's share: every file that starts in [lo, hi) (and, on the last
 * rank, the empty ones at the end) from its start, plus the tail of the file
 * that runs into lo. */
static td_status job_run(bpe_job *j, plan *p, const char *spool_name) {
  for (int64_t i = 0; i < p->n; ++i) {
    int64_t fs = j->fstart[i], fe = j->fstart[i + 1];
    int64_t a = fs > j->lo ? fs : j->lo, e = fe < j->hi ? fe : j->hi;
    int starts = fs >= j->lo && (fs < j->hi || (j->last && fs == j->total));
    int runs_in = fs < j->lo && fe > j->lo;
    if (starts || runs_in)
      TD_CHECK(job_piece(j, p, i, a - fs, e - fs, starts, e == fe, spool_name));
  }
  return TD_OK;
}

/* Rank 0's plan to every rank: n, then per file its size, whether it is
 * spooled (standard input: rank 0 alone can read it) and its path. */
static td_status plan_share(plan *p, MPI_Comm comm, int rank, int *spooled) {
  int64_t n = p->n, bytes = 0;
  char *blob = NULL;
  td_status st = TD_OK;
  *spooled = 0;
  if (rank == 0)
    for (int64_t i = 0; i < n; ++i) bytes += 16 + (int64_t)strlen(p->v[i].path) + 1;
  int64_t head[2] = {n, bytes};
  TD_MPI_CHECK(MPI_Bcast(head, 2, MPI_INT64_T, 0, comm));
  n = head[0], bytes = head[1];
  TD_CHECK(td_alloc((void **)&blob, (size_t)(bytes > 0 ? bytes : 1), "prepare file list"));
  if (rank == 0) {
    char *w = blob;
    for (int64_t i = 0; i < n; ++i) {
      int64_t meta[2] = {p->v[i].size, p->v[i].spool_fd >= 0};
      memcpy(w, meta, 16);
      size_t l = strlen(p->v[i].path) + 1;
      memcpy(w + 16, p->v[i].path, l);
      w += 16 + l;
    }
  }
  for (int64_t off = 0; off < bytes;) { /* in pieces of at most 1 GiB */
    int m = bytes - off < (1 << 30) ? (int)(bytes - off) : (1 << 30);
    if (MPI_Bcast(blob + off, m, MPI_BYTE, 0, comm) != MPI_SUCCESS)
      TD_FAIL_GOTO(TD_ERR_MPI, "prepare: sharing the list of input files failed");
    off += m;
  }
  const char *r = blob;
  for (int64_t i = 0; i < n; ++i) {
    int64_t meta[2];
    memcpy(meta, r, 16);
    *spooled |= meta[1] != 0;
    if (rank != 0) TD_CHECK_GOTO(plan_add(p, r + 16, meta[0], -1));
    r += 16 + strlen(r + 16) + 1;
  }
done:
  td_free(blob);
  return st;
}

/* Document starts: /documents (those < ntrain) and /val_documents (the
 * others, less ntrain; 0 first when the split falls inside a document), each
 * rank writing its own (global start = first + its spool place), in order.
 * Collective on comm; f is the dataset file (parallel when comm has more than
 * one rank). */
static td_status write_documents(MPI_Comm comm, hid_t f, const char *tmp, const bpe_job *j,
                                 int64_t first, int64_t ntrain, int64_t ntok) {
  td_status st = TD_OK;
  int64_t mine[3] = {0, 0, 0}, all[3], before[3] = {0, 0, 0}; /* train, val, one at ntrain */
  for (int64_t k = 0; k < j->ndocs; ++k) {
    int64_t g = first + j->docs[k];
    if (g >= ntok) continue; /* an empty last file: no token, no document */
    mine[g < ntrain ? 0 : 1]++;
    mine[2] += g == ntrain;
  }
  int rank;
  MPI_Comm_rank(comm, &rank);
  if (MPI_Allreduce(mine, all, 3, MPI_INT64_T, MPI_SUM, comm) != MPI_SUCCESS ||
      MPI_Exscan(mine, before, 2, MPI_INT64_T, MPI_SUM, comm) != MPI_SUCCESS)
    TD_FAIL(TD_ERR_MPI, "prepare: counting the documents of the ranks failed");
  if (rank == 0) before[0] = before[1] = 0;
  int lead = ntok > ntrain && all[2] == 0; /* the val split starts inside a document */
  int64_t *buf = NULL;
  hid_t d[2] = {-1, -1};
  const char *names[2] = {"/documents", "/val_documents"};
  int64_t count[2] = {all[0], all[1] + lead};
  TD_CHECK(td_alloc((void **)&buf, (size_t)(j->ndocs + 1) * sizeof *buf, "document starts"));
  for (int s = 0; s < 2; ++s) {
    if (s == 1 && ntok <= ntrain) break;
    hsize_t dim = (hsize_t)count[s];
    hid_t space = H5Screate_simple(1, &dim, NULL);
    d[s] = space < 0 ? -1 : H5Dcreate2(f, names[s], H5T_STD_I64LE, space, H5P_DEFAULT,
                                         H5P_DEFAULT, H5P_DEFAULT);
    if (space >= 0) H5Sclose(space);
    if (d[s] < 0)
      TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot create %s: %s", tmp, names[s], td_h5_error_text());
    int64_t n = 0, at = before[s] + (s == 1 ? lead : 0);
    if (s == 1 && lead && rank == 0) buf[n++] = 0, at = 0;
    for (int64_t k = 0; k < j->ndocs; ++k) {
      int64_t g = first + j->docs[k];
      if (g < ntok && (g < ntrain) == (s == 0)) buf[n++] = s == 0 ? g : g - ntrain;
    }
    if (n > 0) {
      hsize_t start = (hsize_t)at, cnt = (hsize_t)n;
      hid_t fs = H5Dget_space(d[s]), ms = H5Screate_simple(1, &cnt, NULL);
      herr_t e = fs < 0 || ms < 0 ? -1
                 : H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &cnt, NULL);
      if (e >= 0) e = H5Dwrite(d[s], H5T_NATIVE_INT64, ms, fs, H5P_DEFAULT, buf);
      if (ms >= 0) H5Sclose(ms);
      if (fs >= 0) H5Sclose(fs);
      if (e < 0)
        TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot write %s: %s", tmp, names[s], td_h5_error_text());
    }
  }
done:
  td_h5_close(&d[0]);
  td_h5_close(&d[1]);
  td_free(buf);
  return st;
}

/* Write this rank's spooled tokens, global tokens [first, first + n), to
 * /tokens [0, ntrain) and /val_tokens after it. */
static td_status job_write(bpe_job *j, hid_t dtrain, hid_t dval, const char *tmp, int64_t first,
                           int64_t ntrain, const char *spool_name) {
  size_t m = j->tokcap > 65536 ? j->tokcap : 65536;
  if (j->tokcap < m) {
    td_free(j->tok);
    j->tok = NULL, j->tokcap = 0;
    TD_CHECK(td_alloc((void **)&j->tok, m * sizeof *j->tok, "prepare token buffer"));
    j->tokcap = m;
  }
  for (int64_t k = 0; k < j->ntok;) {
    int64_t c = j->ntok - k < (int64_t)m ? j->ntok - k : (int64_t)m;
    int64_t g = first + k; /* global index of the piece's first token */
    if (g < ntrain && g + c > ntrain) c = ntrain - g; /* not across the split */
    ssize_t r = pread(j->spool, j->tok, (size_t)c * sizeof *j->tok,
                      (off_t)k * (off_t)sizeof *j->tok);
    if (r != (ssize_t)((size_t)c * sizeof *j->tok))
      TD_FAIL(TD_ERR_IO, "%s: cannot read back tokens: %s", spool_name,
              r < 0 ? strerror(errno) : "short read");
    if (g < ntrain)
      TD_CHECK(write_tokens(dtrain, tmp, "/tokens", g, H5T_NATIVE_UINT32, j->tok, c));
    else
      TD_CHECK(write_tokens(dval, tmp, "/val_tokens", g - ntrain, H5T_NATIVE_UINT32, j->tok, c));
    k += c;
  }
  return TD_OK;
}

td_status td_prepare__split_documents(hid_t f, const int64_t *starts, int64_t n, int64_t lo,
                                      int64_t hi, int val) {
  td_status st = TD_OK;
  int64_t *docs = NULL, nd = 0;
  TD_CHECK(td_alloc((void **)&docs, (size_t)(n + 1) * sizeof *docs, "document starts"));
  docs[nd++] = 0; /* the split's first token starts a document, or continues one */
  for (int64_t d = 0; d < n; d++)
    if (starts[d] > lo && starts[d] < hi) docs[nd++] = starts[d] - lo;
  int64_t dims[1] = {nd};
  st = td_h5_write(f, val ? "/val_documents" : "/documents", H5T_NATIVE_INT64, 1, dims, docs);
  td_free(docs);
  return st;
}

/* The byte tokenizer's document starts: each non-empty file's first byte. */
static td_status byte_documents(hid_t f, const plan *p, int64_t total, int64_t ntrain) {
  td_status st = TD_OK;
  int64_t *d = NULL, nd = 0, at = 0;
  TD_CHECK(td_alloc((void **)&d, (size_t)(p->n + 1) * sizeof *d, "document starts"));
  for (int64_t i = 0; i < p->n; at += p->v[i++].size)
    if (p->v[i].size > 0) d[nd++] = at;
  st = td_prepare__split_documents(f, d, nd, 0, ntrain, 0);
  if (st == TD_OK && total > ntrain) st = td_prepare__split_documents(f, d, nd, ntrain, total, 1);
  td_free(d);
  return st;
}

td_status td_prepare(const char *out_path, double val_fraction, int ninputs,
                     char **inputs, size_t buffer_bytes, FILE *log) {
  td_status st = TD_OK;
  plan p = {0};
  char *tmp = NULL;
  uint16_t *tok = NULL;
  hid_t f = -1, dtrain = -1, dval = -1;
  int fd = -1, fd_own = 0, tmp_made = 0;

  TD_REQUIRE(out_path && out_path[0], TD_ERR_USAGE, "prepare: no output file given (--out)");
  TD_REQUIRE(ninputs >= 1 && inputs, TD_ERR_USAGE,
             "prepare: no inputs (give text files, folders or - for stdin) for %s",
             out_path);
  TD_REQUIRE(val_fraction >= 0.0 && val_fraction < 1.0, TD_ERR_USAGE,
             "prepare: validation fraction %g for %s is outside [0, 1)",
             val_fraction, out_path);
  td_h5_init();
  if (buffer_bytes == 0) buffer_bytes = TD_PREPARE_BUFFER_DEFAULT;
  if (buffer_bytes < TD_PREPARE_MIN_BUFFER) buffer_bytes = TD_PREPARE_MIN_BUFFER;
  /* One third reads bytes, two thirds hold them as uint16 tokens. */
  p.buf_bytes = buffer_bytes / 3;
  p.out_path = out_path;
  p.log = log;
  TD_CHECK_GOTO(td_alloc((void **)&p.buf, p.buf_bytes, "prepare read buffer"));
  TD_CHECK_GOTO(td_alloc((void **)&tok, p.buf_bytes * sizeof *tok, "prepare token buffer"));
  struct stat osb;
  if (stat(out_path, &osb) == 0) {
    p.have_out = 1;
    p.out_dev = osb.st_dev;
    p.out_ino = osb.st_ino;
  }

  for (int i = 0; i < ninputs; ++i) TD_CHECK_GOTO(add_input(&p, inputs[i]));
  int64_t total = 0;
  for (int64_t i = 0; i < p.n; ++i) total += p.v[i].size;
  if (total == 0)
    TD_FAIL_GOTO(TD_ERR_USAGE, "prepare: the inputs (%s%s) hold no bytes", inputs[0],
                 ninputs > 1 ? ", ..." : "");
  int64_t nval = (int64_t)floor((double)total * val_fraction);
  if (nval < 0) nval = 0;
  if (nval >= total) nval = total - 1;
  int64_t ntrain = total - nval;

  size_t ol = strlen(out_path);
  TD_CHECK_GOTO(td_alloc((void **)&tmp, ol + 5, "prepare path"));
  memcpy(tmp, out_path, ol);
  memcpy(tmp + ol, ".tmp", 5);
  TD_CHECK_GOTO(td_h5_create(tmp, MPI_COMM_NULL, &f));
  tmp_made = 1;
  TD_CHECK_GOTO(create_tokens(f, tmp, "/tokens", ntrain, 0, &dtrain));
  if (nval > 0) TD_CHECK_GOTO(create_tokens(f, tmp, "/val_tokens", nval, 0, &dval));
  TD_CHECK_GOTO(td_h5_attr_write_i64(f, "vocab_size", 256));
  TD_CHECK_GOTO(td_h5_attr_write_str(f, "tokenizer", "bytes"));

  /* Stream every file through the buffer: token k of the concatenation goes
   * to /tokens[k] if k < ntrain, else /val_tokens[k - ntrain]. */
  int64_t k = 0;
  for (int64_t i = 0; i < p.n; ++i) {
    const src *s = &p.v[i];
    fd_own = s->spool_fd < 0;
    if (!fd_own) {
      fd = s->spool_fd;
      if (lseek(fd, 0, SEEK_SET) != 0)
        TD_FAIL_GOTO(TD_ERR_IO, "%s: cannot rewind the spool file: %s", s->path,
                     strerror(errno));
    } else {
      fd = open(s->path, O_RDONLY | O_CLOEXEC);
      if (fd < 0) TD_FAIL_GOTO(TD_ERR_IO, "%s: cannot read: %s", s->path, strerror(errno));
    }
    int64_t got = 0;
    for (;;) {
      ssize_t r = read(fd, p.buf, p.buf_bytes);
      if (r < 0) {
        if (errno == EINTR) continue;
        TD_FAIL_GOTO(TD_ERR_IO, "%s: read failed: %s", s->path, strerror(errno));
      }
      if (r == 0) break;
      if (got + r > s->size)
        TD_FAIL_GOTO(TD_ERR_IO, "%s: grew while being read (was %lld bytes)",
                     s->path, (long long)s->size);
      for (ssize_t j = 0; j < r; ++j) tok[j] = p.buf[j]; /* token = byte value */
      int64_t off = 0;
      while (off < r) {
        if (k < ntrain) {
          int64_t m = ntrain - k < r - off ? ntrain - k : r - off;
          TD_CHECK_GOTO(write_tokens(dtrain, tmp, "/tokens", k, H5T_NATIVE_UINT16, tok + off, m));
          k += m;
          off += m;
        } else {
          int64_t m = r - off;
          TD_CHECK_GOTO(write_tokens(dval, tmp, "/val_tokens", k - ntrain, H5T_NATIVE_UINT16, tok + off, m));
          k += m;
          off += m;
        }
      }
      got += r;
    }
    if (fd_own) close(fd);
    fd = -1;
    if (got != s->size)
      TD_FAIL_GOTO(TD_ERR_IO, "%s: shrank while being read (%lld bytes, was %lld)",
                   s->path, (long long)got, (long long)s->size);
  }
  TD_CHECK_GOTO(byte_documents(f, &p, total, ntrain));

  td_h5_close(&dval);
  td_h5_close(&dtrain);
  if (H5Fclose(f) < 0) {
    f = -1;
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot close: %s", tmp, td_h5_error_text());
  }
  f = -1;
  if (rename(tmp, out_path) != 0)
    TD_FAIL_GOTO(TD_ERR_IO, "%s: cannot rename %s to it: %s", out_path, tmp,
                 strerror(errno));
  tmp_made = 0;
  logf_(log,
          "prepare: read %lld files, %lld bytes = %lld tokens (byte-level "
          "tokenizer, vocab_size 256)\n",
          (long long)p.n, (long long)total, (long long)total);
  logf_(log,
        "prepare: wrote %s: /tokens %lld train tokens, %s%lld val tokens "
        "(val fraction %g)\n",
        out_path, (long long)ntrain, nval > 0 ? "/val_tokens " : "no /val_tokens, ",
        (long long)nval, val_fraction);
done:
  if (fd >= 0 && fd_own) close(fd);
  td_h5_close(&dval);
  td_h5_close(&dtrain);
  td_h5_close(&f);
  if (tmp_made) unlink(tmp);
  td_free(tmp);
  td_free(tok);
  td_free(p.buf);
  plan_free(&p);
  return st;
}

/* "<out_path><suffix>" in a new string (NULL: out of memory). */
static char *path_with(const char *out_path, const char *suffix) {
  size_t ol = strlen(out_path), sl = strlen(suffix);
  char *t = malloc(ol + sl + 1);
  if (t) memcpy(t, out_path, ol), memcpy(t + ol, suffix, sl + 1);
  return t;
}

td_status td_prepare_bpe(MPI_Comm comm, const char *out_path, double val_fraction,
                         int ninputs, char **inputs, size_t buffer_bytes, td_bpe *bpe,
                         FILE *log) {
  td_status st = TD_OK;
  int rank = 0, size = 1, spooled = 0, tmp_made = 0;
  plan p = {0};
  bpe_job j = {0};
  char *tmp = NULL, *spool_name = NULL;
  int64_t *fstart = NULL, *los = NULL;
  hid_t f = -1, dtrain = -1, dval = -1;
  double t0 = td_now();
  j.spool = -1;

  TD_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  TD_MPI_CHECK(MPI_Comm_size(comm, &size));
  TD_REQUIRE(out_path && out_path[0], TD_ERR_USAGE, "prepare: no output file given (--out)");
  TD_REQUIRE(ninputs >= 1 && inputs, TD_ERR_USAGE,
             "prepare: no inputs (give text files, folders or - for stdin) for %s", out_path);
  TD_REQUIRE(val_fraction >= 0.0 && val_fraction < 1.0, TD_ERR_USAGE,
             "prepare: validation fraction %g for %s is outside [0, 1)", val_fraction, out_path);
  TD_REQUIRE(bpe, TD_ERR_INTERNAL, "prepare: no tokenizer for %s", out_path);
  int wide = td_bpe_vocab_size(bpe) > 65536;
  TD_CHECK(td_bpe_doc_tokens(bpe, &j.bos, &j.eos));
  td_h5_init();
  if (buffer_bytes == 0) buffer_bytes = TD_PREPARE_BUFFER_DEFAULT;
  if (buffer_bytes < TD_PREPARE_MIN_BUFFER) buffer_bytes = TD_PREPARE_MIN_BUFFER;
  p.buf_bytes = buffer_bytes / 3; /* >= 16 */
  p.out_path = out_path;
  p.log = rank == 0 ? log : NULL;
  st = td_alloc((void **)&p.buf, p.buf_bytes, "prepare read buffer");
  if (st == TD_OK && rank == 0) { /* rank 0 lists (and spools) the inputs */
    struct stat osb;
    if (stat(out_path, &osb) == 0) p.have_out = 1, p.out_dev = osb.st_dev, p.out_ino = osb.st_ino;
    for (int i = 0; i < ninputs && st == TD_OK; ++i) st = add_input(&p, inputs[i]);
  }
  TD_CHECK_GOTO(td_agree(comm, st));
  TD_CHECK_GOTO(td_agree(comm, plan_share(&p, comm, rank, &spooled)));

  /* the shares: rank r's starts at the first cut at or after r/size of the
   * bytes (standard input is rank 0's alone: no split) */
  TD_CHECK_GOTO(td_alloc((void **)&fstart, (size_t)(p.n + 1) * sizeof *fstart, "prepare plan"));
  TD_CHECK_GOTO(td_alloc((void **)&los, (size_t)(size + 1) * sizeof *los, "prepare plan"));
  fstart[0] = 0;
  for (int64_t i = 0; i < p.n; ++i) fstart[i + 1] = fstart[i] + p.v[i].size;
  int64_t total = fstart[p.n];
  if (total == 0)
    TD_FAIL_GOTO(TD_ERR_USAGE, "prepare: the inputs (%s%s) hold no bytes", inputs[0],
                 ninputs > 1 ? ", ..." : "");
  int64_t lo = 0;
  if (rank > 0 && spooled) lo = total;
  else if (rank > 0) st = first_cut(&p, fstart, (int64_t)((double)total * rank / size), &lo);
  TD_CHECK_GOTO(td_agree(comm, st));
  if (MPI_Allgather(&lo, 1, MPI_INT64_T, los, 1, MPI_INT64_T, comm) != MPI_SUCCESS)
    TD_FAIL_GOTO(TD_ERR_MPI, "prepare: sharing the split of the input failed");
  los[size] = total;
  if (size > 1 && spooled)
    logf_(p.log, "prepare: standard input or a pipe is among the inputs: rank 0 tokenizes "
                 "everything (no split over the %d ranks)\n", size);
  else if (size > 1 && p.log) { /* the shares, in MB (at most 8 shown) */
    logf_(p.log, "prepare: split over %d ranks, shares of", size);
    for (int r = 0; r < size && r < 8; ++r) logf_(p.log, " %.3f", (los[r + 1] - los[r]) / 1e6);
    logf_(p.log, "%s MB\n", size > 8 ? " ..." : "");
  }

  /* tokenize this rank's share into an unlinked spool file next to the output */
  char suffix[48];
  snprintf(suffix, sizeof suffix, ".tmp.rank%d.XXXXXX", rank);
  if (!(tmp = path_with(out_path, ".tmp")) || !(spool_name = path_with(out_path, suffix)))
    TD_FAIL_GOTO(TD_ERR_NOMEM, "prepare: out of memory");
  j.b = bpe, j.fstart = fstart, j.lo = los[rank], j.hi = los[rank + 1], j.total = total;
  j.last = rank == size - 1;
  j.cap = p.buf_bytes;
  j.t0 = j.last_log = td_now();
  j.spool = mkstemp(spool_name);
  if (j.spool < 0)
    st = td_error_set(TD_ERR_IO, __FILE__, __LINE__, __func__,
                      "%s: cannot create a spool file %s: %s", out_path, spool_name,
                      strerror(errno));
  else
    unlink(spool_name);
  if (st == TD_OK) st = td_alloc((void **)&j.text, j.cap, "prepare text buffer");
  if (st == TD_OK) st = job_run(&j, &p, spool_name);
  TD_CHECK_GOTO(td_agree(comm, st));
  double t_tok = td_now() - t0;

  /* where each rank's tokens go; the last floor(k · val_fraction) are validation */
  int64_t first = 0, k = 0;
  if (MPI_Exscan(&j.ntok, &first, 1, MPI_INT64_T, MPI_SUM, comm) != MPI_SUCCESS ||
      MPI_Allreduce(&j.ntok, &k, 1, MPI_INT64_T, MPI_SUM, comm) != MPI_SUCCESS)
    TD_FAIL_GOTO(TD_ERR_MPI, "prepare: counting the tokens of the ranks failed");
  if (rank == 0) first = 0; /* MPI_Exscan leaves it undefined there */
  int64_t nval = (int64_t)floor((double)k * val_fraction);
  if (nval >= k) nval = k - 1;
  if (nval < 0) nval = 0;
  int64_t ntrain = k - nval;

  /* the dataset: one file, every rank writing its tokens (parallel HDF5) */
  st = td_h5_create(tmp, size > 1 ? comm : MPI_COMM_NULL, &f);
  TD_CHECK_GOTO(td_agree(comm, st));
  tmp_made = 1;
  st = create_tokens(f, tmp, "/tokens", ntrain, wide, &dtrain);
  if (st == TD_OK && nval > 0) st = create_tokens(f, tmp, "/val_tokens", nval, wide, &dval);
  if (st == TD_OK) st = td_h5_attr_write_i64(f, "vocab_size", td_bpe_vocab_size(bpe));
  if (st == TD_OK)
    st = td_h5_attr_write_str(f, "tokenizer", td_bpe_dialect_name(td_bpe_get_dialect(bpe)));
  if (st == TD_OK) st = td_h5_attr_write_str(f, "tokenizer_sha256", td_bpe_hash(bpe));
  /* eot_token: the token that separates documents (GPT-2's <|endoftext|>
   * before each, LLaMA 3's <|end_of_text|> after each); bos_token: LLaMA 3's
   * <|begin_of_text|> before each */
  if (st == TD_OK) st = td_h5_attr_write_i64(f, "eot_token", j.eos >= 0 ? j.eos : j.bos);
  if (st == TD_OK && j.eos >= 0) st = td_h5_attr_write_i64(f, "bos_token", j.bos);
  if (st == TD_OK) { /* the tokenizer's files travel with the data (and on into checkpoints) */
    td_tokenizer_files tf;
    st = td_tokenizer_files_of(bpe, &tf);
    if (st == TD_OK) st = td_tokenizer_h5_write(f, &tf, rank == 0);
    td_tokenizer_files_free(&tf);
  }
  TD_CHECK_GOTO(td_agree(comm, st));
  TD_CHECK_GOTO(td_agree(comm, job_write(&j, dtrain, dval, tmp, first, ntrain, spool_name)));
  TD_CHECK_GOTO(td_agree(comm, write_documents(comm, f, tmp, &j, first, ntrain, k)));
  td_h5_close(&dval);
  td_h5_close(&dtrain);
  if (H5Fclose(f) < 0)
    st = td_error_set(TD_ERR_HDF5, __FILE__, __LINE__, __func__, "%s: cannot close: %s", tmp,
                      td_h5_error_text());
  f = -1;
  TD_CHECK_GOTO(td_agree(comm, st));
  if (rank == 0 && rename(tmp, out_path) != 0)
    st = td_error_set(TD_ERR_IO, __FILE__, __LINE__, __func__, "%s: cannot rename %s to it: %s",
                      out_path, tmp, strerror(errno));
  TD_CHECK_GOTO(td_agree(comm, st));
  tmp_made = 0;
  double t_all = td_now() - t0;
  logf_(p.log,
        "prepare: read %lld files, %lld bytes = %lld tokens (%s tokenizer, vocab_size %lld, "
        "%.2f bytes per token) on %d rank%s: tokenized in %.2f s (%.1f MB/s), %.2f s in all\n",
        (long long)p.n, (long long)total, (long long)k,
        td_bpe_dialect_name(td_bpe_get_dialect(bpe)), (long long)td_bpe_vocab_size(bpe),
        (double)total / (double)k, size, size == 1 ? "" : "s", t_tok,
        t_tok > 0 ? total / 1e6 / t_tok : 0.0, t_all);
  logf_(p.log,
        "prepare: wrote %s: /tokens %lld train tokens, %s%lld val tokens (val fraction %g)\n",
        out_path, (long long)ntrain, nval > 0 ? "/val_tokens " : "no /val_tokens, ",
        (long long)nval, val_fraction);
done:
  td_h5_close(&dval);
  td_h5_close(&dtrain);
  td_h5_close(&f);
  if (tmp_made && rank == 0) unlink(tmp);
  if (j.spool >= 0) close(j.spool);
  free(tmp);
  free(spool_name);
  td_free(fstart);
  td_free(los);
  td_free(j.text);
  td_free(j.tok);
  free(j.ids);
  free(j.docs);
  td_free(p.buf);
  plan_free(&p);
  return st;
}
