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
#include "io/td_h5.h"
#include "io/td_tokenizer_h5.h"
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

/* A 1-D uint16 dataset of n tokens, chunked. */
static td_status create_tokens(hid_t f, const char *tmp, const char *name,
                               int64_t n, hid_t *out) {
  td_status st = TD_OK;
  hsize_t dim = (hsize_t)n;
  hsize_t chunk = n < TD_PREPARE_CHUNK_TOKENS ? (hsize_t)n : TD_PREPARE_CHUNK_TOKENS;
  hid_t space = H5Screate_simple(1, &dim, NULL);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (space < 0 || dcpl < 0 || H5Pset_chunk(dcpl, 1, &chunk) < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot set up %s: %s", tmp, name,
                 td_h5_error_text());
  *out = H5Dcreate2(f, name, H5T_STD_U16LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (*out < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot create %s: %s", tmp, name,
                 td_h5_error_text());
done:
  if (dcpl >= 0) H5Pclose(dcpl);
  if (space >= 0) H5Sclose(space);
  return st;
}

/* Write n tokens at offset `at` of dataset d. */
static td_status write_tokens(hid_t d, const char *tmp, const char *name,
                              int64_t at, const uint16_t *tok, int64_t n) {
  hsize_t start = (hsize_t)at, count = (hsize_t)n;
  hid_t fs = H5Dget_space(d);
  hid_t ms = H5Screate_simple(1, &count, NULL);
  herr_t e = (fs < 0 || ms < 0) ? -1
             : H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL);
  if (e >= 0) e = H5Dwrite(d, H5T_NATIVE_UINT16, ms, fs, H5P_DEFAULT, tok);
  const char *why = e < 0 ? td_h5_error_text() : NULL;
  if (ms >= 0) H5Sclose(ms);
  if (fs >= 0) H5Sclose(fs);
  if (e < 0)
    TD_FAIL(TD_ERR_HDF5, "%s: cannot write tokens [%lld, %lld) of %s: %s", tmp,
            (long long)at, (long long)(at + n), name, why);
  return TD_OK;
}

/* ---- GPT-2 BPE ------------------------------------------------------------------- */

/* A text may be cut just after a '\n' that follows a printable ASCII
 * character and precedes one: that '\n' is a pre-token of its own whether
 * the text goes on or ends there (\s+(?!\S), then \s+), and the next
 * pre-token starts after it either way, so encoding the two parts apart
 * gives the ids of the whole (td_bpe.h, pre-tokenization). The last such
 * cut in t[0, n), or 0 when there is none. */
static size_t bpe_cut(const unsigned char *t, size_t n) {
  for (size_t c = n > 0 ? n - 1 : 0; c >= 2; --c)
    if (t[c - 1] == '\n' && t[c - 2] > 0x20 && t[c - 2] < 0x7F && t[c] > 0x20 && t[c] < 0x7F)
      return c;
  return 0;
}

/* Append n tokens to the extendable 1-D dataset d that holds *k. */
static td_status append_tokens(hid_t d, const char *tmp, const int32_t *ids, size_t n,
                               uint16_t *tok, int64_t *k) {
  for (size_t i = 0; i < n; ++i) tok[i] = (uint16_t)ids[i];
  hsize_t dim = (hsize_t)(*k + (int64_t)n);
  if (H5Dset_extent(d, &dim) < 0)
    TD_FAIL(TD_ERR_HDF5, "%s: cannot extend /tokens to %llu tokens: %s", tmp,
            (unsigned long long)dim, td_h5_error_text());
  TD_CHECK(write_tokens(d, tmp, "/tokens", *k, tok, (int64_t)n));
  *k += (int64_t)n;
  return TD_OK;
}

/* Every input through the GPT-2 tokenizer b into an extendable /tokens: each
 * file is one document, preceded by <|endoftext|> (as GPT-2's and llm.c's
 * data are); a document is encoded in pieces cut by bpe_cut, the same ids as
 * whole. Then the last floor(n · val_fraction) tokens move to /val_tokens. */
static td_status prepare_bpe(plan *p, const char *tmp, hid_t f, td_bpe *b, double val_fraction,
                             int64_t total, int64_t *ntrain_out, int64_t *nval_out) {
  td_status st = TD_OK;
  hid_t dtok = -1, dval = -1, space = -1, dcpl = -1;
  unsigned char *text = NULL;
  int32_t *ids = NULL;
  uint16_t *tok = NULL;
  size_t nids = 0, idcap = 0, tokcap = 0, cap = p->buf_bytes, len = 0;
  int fd = -1, fd_own = 0;
  int32_t eot = 0;
  int64_t k = 0, done_bytes = 0;
  double t0 = td_now(), last_log = t0;

  TD_REQUIRE(td_bpe_vocab_size(b) <= 65536, TD_ERR_USAGE,
             "prepare: the tokenizer has %lld tokens; datasets hold uint16 ids (<= 65536)",
             (long long)td_bpe_vocab_size(b));
  TD_CHECK(td_bpe_token_id(b, "<|endoftext|>", &eot));
  hsize_t zero = 0, unlimited = H5S_UNLIMITED, chunk = TD_PREPARE_CHUNK_TOKENS;
  space = H5Screate_simple(1, &zero, &unlimited);
  dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (space < 0 || dcpl < 0 || H5Pset_chunk(dcpl, 1, &chunk) < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot set up /tokens: %s", tmp, td_h5_error_text());
  dtok = H5Dcreate2(f, "/tokens", H5T_STD_U16LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (dtok < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot create /tokens: %s", tmp, td_h5_error_text());
  TD_CHECK_GOTO(td_alloc((void **)&text, cap, "prepare text buffer"));

  for (int64_t i = 0; i < p->n; ++i) {
    const src *s = &p->v[i];
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
    nids = 0;
    if (nids == idcap) {
      int32_t *g = realloc(ids, 1024 * sizeof *ids);
      if (!g) TD_FAIL_GOTO(TD_ERR_NOMEM, "prepare: out of memory for token ids");
      ids = g, idcap = 1024;
    }
    ids[nids++] = eot;
    int64_t got = 0;
    len = 0;
    for (int eof = 0; !eof;) {
      if (len == cap) { /* no cut in the whole buffer (one very long line): grow */
        unsigned char *g = realloc(text, 2 * cap);
        if (!g) TD_FAIL_GOTO(TD_ERR_NOMEM, "%s: out of memory for a %zu-byte line", s->path, cap);
        text = g, cap *= 2;
      }
      ssize_t r = read(fd, text + len, cap - len);
      if (r < 0) {
        if (errno == EINTR) continue;
        TD_FAIL_GOTO(TD_ERR_IO, "%s: read failed: %s", s->path, strerror(errno));
      }
      if (got + r > s->size)
        TD_FAIL_GOTO(TD_ERR_IO, "%s: grew while being read (was %lld bytes)", s->path,
                     (long long)s->size);
      got += r, len += (size_t)r;
      eof = r == 0;
      size_t cut = eof ? len : bpe_cut(text, len);
      if (cut == 0) continue;
      TD_CHECK_GOTO(td_bpe_encode(b, text, cut, &ids, &nids, &idcap));
      if (nids > tokcap) {
        td_free(tok);
        tok = NULL;
        tokcap = 0;
        TD_CHECK_GOTO(td_alloc((void **)&tok, 2 * nids * sizeof *tok, "prepare token buffer"));
        tokcap = 2 * nids;
      }
      TD_CHECK_GOTO(append_tokens(dtok, tmp, ids, nids, tok, &k));
      nids = 0;
      memmove(text, text + cut, len - cut);
      len -= cut;
      done_bytes += (int64_t)cut;
      double now = td_now();
      if (now - last_log >= 5.0 && p->log) { /* a progress line on long inputs */
        double rate = (double)done_bytes / (now - t0);
        logf_(p->log, "prepare: %.1f of %.1f MB, %lld tokens, %.1f MB/s, ETA %.0f s\n",
              done_bytes / 1e6, total / 1e6, (long long)k, rate / 1e6,
              rate > 0 ? (double)(total - done_bytes) / rate : 0.0);
        fflush(p->log);
        last_log = now;
      }
    }
    if (fd_own) close(fd);
    fd = -1;
    if (got != s->size)
      TD_FAIL_GOTO(TD_ERR_IO, "%s: shrank while being read (%lld bytes, was %lld)", s->path,
                   (long long)got, (long long)s->size);
  }

  /* the split: the last nval tokens move to /val_tokens */
  int64_t nval = (int64_t)floor((double)k * val_fraction);
  if (nval >= k) nval = k - 1;
  if (nval < 0) nval = 0;
  int64_t ntrain = k - nval;
  if (nval > 0) {
    TD_CHECK_GOTO(create_tokens(f, tmp, "/val_tokens", nval, &dval));
    for (int64_t j = 0; j < nval;) {
      int64_t m = nval - j < TD_PREPARE_CHUNK_TOKENS ? nval - j : TD_PREPARE_CHUNK_TOKENS;
      hsize_t start = (hsize_t)(ntrain + j), count = (hsize_t)m;
      uint16_t buf[TD_PREPARE_CHUNK_TOKENS];
      hid_t fs = H5Dget_space(dtok), ms = H5Screate_simple(1, &count, NULL);
      herr_t e = fs < 0 || ms < 0 ? -1
                 : H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL);
      if (e >= 0) e = H5Dread(dtok, H5T_NATIVE_UINT16, ms, fs, H5P_DEFAULT, buf);
      if (ms >= 0) H5Sclose(ms);
      if (fs >= 0) H5Sclose(fs);
      if (e < 0)
        TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot read back /tokens for the split: %s", tmp,
                     td_h5_error_text());
      TD_CHECK_GOTO(write_tokens(dval, tmp, "/val_tokens", j, buf, m));
      j += m;
    }
    hsize_t dim = (hsize_t)ntrain;
    if (H5Dset_extent(dtok, &dim) < 0)
      TD_FAIL_GOTO(TD_ERR_HDF5, "%s: cannot cut /tokens to %lld tokens: %s", tmp,
                   (long long)ntrain, td_h5_error_text());
  }
  TD_CHECK_GOTO(td_h5_attr_write_i64(f, "vocab_size", td_bpe_vocab_size(b)));
  TD_CHECK_GOTO(td_h5_attr_write_str(f, "tokenizer", td_bpe_dialect_name(td_bpe_get_dialect(b))));
  TD_CHECK_GOTO(td_h5_attr_write_str(f, "tokenizer_sha256", td_bpe_hash(b)));
  TD_CHECK_GOTO(td_h5_attr_write_i64(f, "eot_token", eot));
  { /* the tokenizer's files travel with the data (and on into checkpoints) */
    td_tokenizer_files tf;
    TD_CHECK_GOTO(td_tokenizer_files_of(b, &tf));
    st = td_tokenizer_h5_write(f, &tf, 1);
    td_tokenizer_files_free(&tf);
    TD_CHECK_GOTO(st);
  }
  *ntrain_out = ntrain, *nval_out = nval;
done:
  if (fd >= 0 && fd_own) close(fd);
  if (dcpl >= 0) H5Pclose(dcpl);
  if (space >= 0) H5Sclose(space);
  td_h5_close(&dval);
  td_h5_close(&dtok);
  td_free(text);
  td_free(tok);
  free(ids);
  return st;
}

td_status td_prepare(const char *out_path, double val_fraction, int ninputs,
                     char **inputs, size_t buffer_bytes, FILE *log) {
  return td_prepare_bpe(out_path, val_fraction, ninputs, inputs, buffer_bytes, NULL, log);
}

td_status td_prepare_bpe(const char *out_path, double val_fraction, int ninputs,
                         char **inputs, size_t buffer_bytes, td_bpe *bpe, FILE *log) {
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
  if (bpe) {
    TD_CHECK_GOTO(prepare_bpe(&p, tmp, f, bpe, val_fraction, total, &ntrain, &nval));
    goto written;
  }
  TD_CHECK_GOTO(create_tokens(f, tmp, "/tokens", ntrain, &dtrain));
  if (nval > 0) TD_CHECK_GOTO(create_tokens(f, tmp, "/val_tokens", nval, &dval));
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
          TD_CHECK_GOTO(write_tokens(dtrain, tmp, "/tokens", k, tok + off, m));
          k += m;
          off += m;
        } else {
          int64_t m = r - off;
          TD_CHECK_GOTO(write_tokens(dval, tmp, "/val_tokens", k - ntrain, tok + off, m));
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

written:
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
  if (bpe)
    logf_(log, "prepare: read %lld files, %lld bytes = %lld tokens (%s tokenizer, vocab_size "
          "%lld, %.2f bytes per token)\n", (long long)p.n, (long long)total,
          (long long)(ntrain + nval), td_bpe_dialect_name(td_bpe_get_dialect(bpe)),
          (long long)td_bpe_vocab_size(bpe), (double)total / (double)(ntrain + nval));
  else
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
