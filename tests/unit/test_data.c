/* test_data.c — the data layer: td_h5 helpers, td_prepare, the three token
 * dataset readers and their errors, the grid-invariant sampler.
 *
 * Usage: test_data TMPDIR. One line per check, then "N passed, M failed";
 * exit status 1 if any check failed. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mpi.h>

#include "io/td_dataset.h"
#include "io/td_h5.h"
#include "io/td_prepare.h"
#include "io/td_sampler.h"
#include "td_rng.h"

static int g_pass, g_fail;
static const char *g_dir;

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("%s ", ok ? "ok  " : "FAIL");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  if (ok) {
    g_pass++;
  } else {
    g_fail++;
    if (td_error_status() != TD_OK)
      printf("     pending error: %s\n%s", td_error_message(), td_error_trace());
  }
  fflush(stdout);
  td_error_clear();
}

/* Check that st is `want` and the pending message contains `needle`. */
static void check_err(td_status st, td_status want, const char *needle,
                      const char *what) {
  int ok = st == want && strstr(td_error_message(), needle) != NULL;
  printf("%s %s -> %s: %s\n", ok ? "ok  " : "FAIL", what, td_status_name(st),
         td_error_message());
  if (ok) {
    g_pass++;
  } else {
    g_fail++;
    printf("     expected %s and a message naming '%s'\n", td_status_name(want),
           needle);
  }
  fflush(stdout);
  td_error_clear();
}

static char *path_of(const char *name) {
  static char buf[8][1024];
  static int k;
  char *b = buf[k++ % 8];
  snprintf(b, sizeof buf[0], "%s/%s", g_dir, name);
  return b;
}

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
    exit(1);
  }
  if (n) fwrite(data, 1, n, f);
  fclose(f);
}

static unsigned char *random_bytes(size_t n, uint64_t seed) {
  unsigned char *b = malloc(n ? n : 1);
  for (size_t i = 0; i < n; ++i) b[i] = (unsigned char)(td_rng_u64(seed, i) & 0xff);
  return b;
}

static void le16(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}
static void le32w(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (unsigned char)(v >> (8 * i));
}

/* An llm.c file: header (magic, version, count) and n tokens of tb bytes. */
static void write_llmc(const char *path, int32_t magic, int32_t version,
                       int32_t count, const uint32_t *tok, int64_t n, int tb) {
  size_t bytes = 1024 + (size_t)n * (size_t)tb;
  unsigned char *b = calloc(1, bytes);
  le32w(b, (uint32_t)magic);
  le32w(b + 4, (uint32_t)version);
  le32w(b + 8, (uint32_t)count);
  for (int64_t i = 0; i < n; ++i) {
    if (tb == 2) le16(b + 1024 + 2 * i, tok[i]);
    else le32w(b + 1024 + 4 * i, tok[i]);
  }
  write_file(path, b, bytes);
  free(b);
}

static int file_exists(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0;
}

/* ---- td_h5 ---------------------------------------------------------------------- */

static void test_h5(void) {
  hid_t f = -1;
  const char *p = path_of("h5.h5");
  td_status st = td_h5_create(p, MPI_COMM_WORLD, &f);
  check(st == TD_OK, "td_h5_create over MPI-IO");
  int64_t grid[3] = {2, 2, 1};
  double betas[2] = {0.9, 0.95};
  st = td_h5_attr_write_str(f, "format", "trident-checkpoint");
  if (st == TD_OK) st = td_h5_attr_write_i64(f, "step", 42);
  if (st == TD_OK) st = td_h5_attr_write_f64(f, "lr", 3e-4);
  if (st == TD_OK) st = td_h5_attr_write_i64v(f, "saved_grid", grid, 3);
  if (st == TD_OK) st = td_h5_attr_write_f64v(f, "betas", betas, 2);
  if (st == TD_OK) st = td_h5_attr_write_i64(f, "step", 43); /* replace */
  int wrank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  if (st == TD_OK) st = td_h5_write_string(f, "/config", "run: {name: t}\n", wrank == 0);
  check(st == TD_OK, "td_h5 attributes and string on an MPI-IO file");
  td_h5_close(&f);
  check(f == -1, "td_h5_close sets -1");
  td_h5_close(&f);

  st = td_h5_open(p, MPI_COMM_NULL, 1, &f);
  float w[6] = {1, 2, 3, 4, 5, 6}, r[6] = {0};
  int64_t dims[2] = {2, 3}, bad[2] = {3, 2};
  if (st == TD_OK) st = td_h5_write(f, "/model/h.0/w", H5T_NATIVE_FLOAT, 2, dims, w);
  if (st == TD_OK) st = td_h5_read(f, "h5.h5", "/model/h.0/w", H5T_NATIVE_FLOAT, 2, dims, r);
  check(st == TD_OK && memcmp(w, r, sizeof w) == 0, "td_h5_write/read round trip");
  int64_t step = 0, g2[3] = {0};
  double lr = 0, b2[2] = {0};
  char fmt[64] = "";
  char *cfg = NULL;
  st = td_h5_attr_read_i64(f, "h5.h5", "step", &step);
  if (st == TD_OK) st = td_h5_attr_read_f64(f, "h5.h5", "lr", &lr);
  if (st == TD_OK) st = td_h5_attr_read_str(f, "h5.h5", "format", fmt, sizeof fmt);
  if (st == TD_OK) st = td_h5_attr_read_i64v(f, "h5.h5", "saved_grid", g2, 3);
  if (st == TD_OK) st = td_h5_attr_read_f64v(f, "h5.h5", "betas", b2, 2);
  if (st == TD_OK) st = td_h5_read_string(f, "h5.h5", "/config", &cfg);
  check(st == TD_OK && step == 43 && lr == 3e-4 && !strcmp(fmt, "trident-checkpoint") &&
            g2[0] == 2 && g2[2] == 1 && b2[1] == 0.95 && cfg &&
            !strcmp(cfg, "run: {name: t}\n"),
        "td_h5 attribute and string read back");
  td_free(cfg);
  check_err(td_h5_read(f, "h5.h5", "/model/h.0/w", H5T_NATIVE_FLOAT, 2, bad, r),
            TD_ERR_HDF5, "expected shape (3, 2), found (2, 3)", "td_h5_read wrong dims");
  check_err(td_h5_read(f, "h5.h5", "/model/nope", H5T_NATIVE_FLOAT, 2, dims, r),
            TD_ERR_HDF5, "/model/nope", "td_h5_read missing dataset");
  check_err(td_h5_attr_read_i64(f, "h5.h5", "missing", &step), TD_ERR_HDF5,
            "missing", "td_h5_attr_read_i64 missing attribute");
  check_err(td_h5_attr_read_i64(f, "h5.h5", "lr", &step), TD_ERR_HDF5, "lr",
            "td_h5_attr_read_i64 of a float attribute");
  check_err(td_h5_attr_read_str(f, "h5.h5", "format", fmt, 4), TD_ERR_HDF5,
            "format", "td_h5_attr_read_str too small a buffer");
  check_err(td_h5_write(f, "/model/h.0/w", H5T_NATIVE_FLOAT, 2, dims, w),
            TD_ERR_HDF5, "/model/h.0/w", "td_h5_write over an existing dataset");
  td_h5_close(&f);
  check_err(td_h5_open(path_of("no-such.h5"), MPI_COMM_NULL, 0, &f), TD_ERR_HDF5,
            "no-such.h5", "td_h5_open missing file");
}

/* ---- td_prepare --------------------------------------------------------------------- */

/* Read /tokens and /val_tokens of a prepared file and compare with want. */
static int prepared_equals(const char *p, const unsigned char *want, int64_t n,
                           int64_t nval_want) {
  hid_t f = -1;
  int ok = 0;
  uint16_t *t = NULL;
  if (td_h5_open(p, MPI_COMM_NULL, 0, &f) != TD_OK) return 0;
  int64_t ntrain = n - nval_want, vs = 0;
  char tk[32] = "";
  t = malloc((size_t)n * sizeof *t + 2);
  if (td_h5_read(f, p, "/tokens", H5T_NATIVE_UINT16, 1, &ntrain, t) != TD_OK) goto done;
  if (nval_want > 0) {
    if (td_h5_read(f, p, "/val_tokens", H5T_NATIVE_UINT16, 1, &nval_want, t + ntrain) != TD_OK)
      goto done;
  } else if (td_h5_exists(f, "/val_tokens")) {
    goto done;
  }
  if (td_h5_attr_read_i64(f, p, "vocab_size", &vs) != TD_OK || vs != 256) goto done;
  if (td_h5_attr_read_str(f, p, "tokenizer", tk, sizeof tk) != TD_OK || strcmp(tk, "bytes"))
    goto done;
  ok = 1;
  for (int64_t i = 0; i < n; ++i)
    if (t[i] != want[i]) {
      printf("     token %lld: %u, expected %u\n", (long long)i, t[i], want[i]);
      ok = 0;
      break;
    }
done:
  free(t);
  td_h5_close(&f);
  return ok;
}

static void test_prepare(void) {
  /* A file much larger than the buffer, every byte value. */
  const int64_t n1 = 70001;
  unsigned char *b1 = random_bytes((size_t)n1, 11);
  b1[0] = 0;
  b1[1] = 255;
  write_file(path_of("big.txt"), b1, (size_t)n1);
  char *in1[] = {path_of("big.txt")};
  const char *out1 = path_of("big.h5");
  td_status st = td_prepare(out1, 0.1, 1, in1, 100, stdout);
  int64_t nval = (int64_t)(n1 * 0.1);
  check(st == TD_OK && prepared_equals(out1, b1, n1, nval),
        "prepare: %lld bytes through a 100-byte buffer, val 0.1 -> %lld/%lld tokens",
        (long long)n1, (long long)(n1 - nval), (long long)nval);
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.tmp", out1);
  check(!file_exists(tmp), "prepare: no .tmp left behind");

  /* Readers on the prepared file: train and val splits, a window across an
   * HDF5 chunk boundary (32768 tokens). */
  td_dataset *d = NULL;
  st = td_dataset_open(out1, TD_SPLIT_TRAIN, 256, &d);
  int32_t win[1001];
  int ok = st == TD_OK && td_dataset_ntokens(d) == n1 - nval &&
           !strcmp(td_dataset_format(d), "trident-hdf5") &&
           td_dataset_nwindows(d, 1000) == (n1 - nval - 1) / 1000;
  if (ok) ok = td_dataset_read_window(d, 32, 1000, win) == TD_OK;
  for (int k = 0; ok && k < 1001; ++k) ok = win[k] == b1[32000 + k];
  check(ok, "trident-hdf5 train split: ntokens, nwindows, window 32 across a chunk boundary");
  td_dataset_close(&d);
  check(d == NULL, "td_dataset_close sets NULL");
  st = td_dataset_open(out1, TD_SPLIT_VAL, 256, &d);
  ok = st == TD_OK && td_dataset_ntokens(d) == nval;
  if (ok) ok = td_dataset_read_window(d, 2, 64, win) == TD_OK;
  for (int k = 0; ok && k < 65; ++k) ok = win[k] == b1[n1 - nval + 128 + k];
  check(ok, "trident-hdf5 val split reads /val_tokens");
  td_dataset_close(&d);
  check_err(td_dataset_open(out1, TD_SPLIT_TRAIN, 100, &d), TD_ERR_DATA, "big.h5",
            "trident-hdf5 vocab_size attribute 256 > deck vocab 100");

  /* A folder, walked recursively in name order, after a plain file, with a
   * bigger-than-buffer file inside; val_fraction 0 gives no /val_tokens. */
  mkdir(path_of("corpus"), 0755);
  mkdir(path_of("corpus/sub"), 0755);
  mkdir(path_of("corpus/sub/deeper"), 0755);
  mkdir(path_of("corpus/empty"), 0755);
  const char *parts[][2] = {{"corpus/b.txt", "bravo\n"},
                            {"corpus/a.txt", "alpha\n"},
                            {"corpus/sub/deeper/d.txt", "delta\n"},
                            {"corpus/sub/c.txt", "charlie charlie charlie charlie\n"},
                            {"corpus/Z.txt", "zulu\n"}};
  for (int i = 0; i < 5; ++i)
    write_file(path_of(parts[i][0]), parts[i][1], strlen(parts[i][1]));
  const char *head = "header file\n";
  write_file(path_of("head.txt"), head, strlen(head));
  /* Expected order: head.txt, then Z.txt a.txt b.txt (byte order: 'Z' < 'a'),
   * empty/ (nothing), sub/c.txt, sub/deeper/d.txt. */
  char want[512];
  snprintf(want, sizeof want, "%s%s%s%s%s%s", head, "zulu\n", "alpha\n", "bravo\n",
           "charlie charlie charlie charlie\n", "delta\n");
  char *in2[] = {path_of("head.txt"), path_of("corpus")};
  const char *out2 = path_of("corpus.h5");
  st = td_prepare(out2, 0.0, 2, in2, 16, stdout);
  check(st == TD_OK && prepared_equals(out2, (const unsigned char *)want,
                                       (int64_t)strlen(want), 0),
        "prepare: file + folder recursively, sorted, val 0 -> no /val_tokens");
  st = td_dataset_open(out2, TD_SPLIT_VAL, 256, &d);
  check(st == TD_OK && td_dataset_ntokens(d) == (int64_t)strlen(want),
        "trident-hdf5 val split falls back to /tokens");
  td_dataset_close(&d);

  /* Preparing a folder that holds the output: the old output is skipped. */
  const char *out3 = path_of("corpus/out.h5");
  char *in3[] = {path_of("corpus")};
  st = td_prepare(out3, 0.0, 1, in3, 0, stdout);
  st = st == TD_OK ? td_prepare(out3, 0.0, 1, in3, 0, stdout) : st;
  check(st == TD_OK && prepared_equals(out3, (const unsigned char *)want + strlen(head),
                                       (int64_t)(strlen(want) - strlen(head)), 0),
        "prepare: an existing output inside the input folder is not read");
  unlink(out3);

  /* Standard input, spooled; exact split 25 bytes * 0.2 = 5. */
  const char *sin = "0123456789abcdefghijklmno";
  write_file(path_of("stdin.txt"), sin, strlen(sin));
  fflush(stdin);
  int saved = dup(STDIN_FILENO);
  FILE *fin = freopen(path_of("stdin.txt"), "rb", stdin);
  char *in4[] = {"-"};
  const char *out4 = path_of("stdin.h5");
  st = fin ? td_prepare(out4, 0.2, 1, in4, 0, stdout) : TD_ERR_IO;
  dup2(saved, STDIN_FILENO);
  close(saved);
  check(st == TD_OK && prepared_equals(out4, (const unsigned char *)sin, 25, 5),
        "prepare: stdin spooled, 25 bytes val 0.2 -> 20/5");

  /* Errors: nothing written, message names the path. */
  const char *outx = path_of("bad.h5");
  check_err(td_prepare(outx, 0.1, 0, in1, 0, NULL), TD_ERR_USAGE, "bad.h5",
            "prepare: no inputs");
  check_err(td_prepare(outx, 1.0, 1, in1, 0, NULL), TD_ERR_USAGE, "bad.h5",
            "prepare: val_fraction 1.0");
  check_err(td_prepare(outx, -0.5, 1, in1, 0, NULL), TD_ERR_USAGE, "bad.h5",
            "prepare: val_fraction -0.5");
  char *inm[] = {path_of("big.txt"), path_of("missing.txt")};
  check_err(td_prepare(outx, 0.1, 2, inm, 0, NULL), TD_ERR_IO, "missing.txt",
            "prepare: unreadable input");
  write_file(path_of("empty.txt"), "", 0);
  char *ine[] = {path_of("empty.txt"), path_of("corpus/empty")};
  check_err(td_prepare(outx, 0.1, 2, ine, 0, NULL), TD_ERR_USAGE, "empty.txt",
            "prepare: empty input");
  snprintf(tmp, sizeof tmp, "%s.tmp", outx);
  check(!file_exists(outx) && !file_exists(tmp), "prepare: failures leave no output");
  free(b1);
}

/* ---- readers on hand-written files --------------------------------------------------- */

static void test_readers(void) {
  const int64_t n = 1000, T = 16;
  uint32_t *tok = malloc((size_t)n * sizeof *tok);
  int32_t win[17];
  td_dataset *d = NULL;
  int ok;

  /* nanoGPT: flat uint16. */
  unsigned char *flat = malloc((size_t)n * 2);
  for (int64_t i = 0; i < n; ++i) {
    tok[i] = (uint32_t)((i * 7919) % 50257);
    le16(flat + 2 * i, tok[i]);
  }
  write_file(path_of("nano.bin"), flat, (size_t)n * 2);
  td_status st = td_dataset_open(path_of("nano.bin"), TD_SPLIT_TRAIN, 50257, &d);
  ok = st == TD_OK && !strcmp(td_dataset_format(d), "nanogpt-bin") &&
       td_dataset_ntokens(d) == n && td_dataset_nwindows(d, T) == (n - 1) / T;
  int64_t last = (n - 1) / T - 1;
  for (int64_t w = 0; ok && w <= last; w += last) {
    ok = td_dataset_read_window(d, w, T, win) == TD_OK;
    for (int k = 0; ok && k <= T; ++k) ok = (uint32_t)win[k] == tok[w * T + k];
  }
  check(ok, "nanogpt-bin: format, ntokens, windows 0 and %lld exact", (long long)last);
  check_err(td_dataset_read_window(d, 0, T, win) == TD_OK
                ? td_dataset_require_windows(d, T, 100, "data.train")
                : TD_ERR_INTERNAL,
            TD_ERR_DATA, "nano.bin (data.train): 1000 tokens give 62 windows of 17 tokens; one global batch needs 100",
            "require_windows too few");
  td_dataset_close(&d);
  /* The same file checked against a small vocabulary: token index and value. */
  st = td_dataset_open(path_of("nano.bin"), TD_SPLIT_TRAIN, 256, &d);
  if (st == TD_OK) {
    char needle[128];
    snprintf(needle, sizeof needle, "token %d (of the file) is %u", 1, tok[1]);
    check_err(td_dataset_read_window(d, 0, T, win), TD_ERR_DATA, needle,
              "nanogpt-bin token >= vocab_size");
  } else {
    check(0, "nanogpt-bin opens with a small vocab");
  }
  td_dataset_close(&d);

  /* llm.c GPT-2: magic 20240520, version 1, uint16. */
  write_llmc(path_of("gpt2.bin"), 20240520, 1, (int32_t)n, tok, n, 2);
  st = td_dataset_open(path_of("gpt2.bin"), TD_SPLIT_VAL, 50257, &d);
  ok = st == TD_OK && !strcmp(td_dataset_format(d), "llmc-bin") && td_dataset_ntokens(d) == n;
  for (int64_t w = 0; ok && w <= last; w += 7) {
    ok = td_dataset_read_window(d, w, T, win) == TD_OK;
    for (int k = 0; ok && k <= T; ++k) ok = (uint32_t)win[k] == tok[w * T + k];
  }
  check(ok, "llmc-bin v1 (uint16): windows exact");
  td_dataset_close(&d);

  /* llm.c LLaMA-3: magic 20240801, version 7, uint32 (values above 65535). */
  for (int64_t i = 0; i < n; ++i) tok[i] = (uint32_t)((i * 104729) % 128256);
  write_llmc(path_of("llama3.bin"), 20240801, 7, (int32_t)n, tok, n, 4);
  st = td_dataset_open(path_of("llama3.bin"), TD_SPLIT_TRAIN, 128256, &d);
  ok = st == TD_OK && !strcmp(td_dataset_format(d), "llmc-bin") && td_dataset_ntokens(d) == n;
  for (int64_t w = 0; ok && w <= last; w += 5) {
    ok = td_dataset_read_window(d, w, T, win) == TD_OK;
    for (int k = 0; ok && k <= T; ++k) ok = (uint32_t)win[k] == tok[w * T + k];
  }
  check(ok, "llmc-bin LLaMA-3 (uint32): windows exact");
  td_dataset_close(&d);

  /* trident HDF5 with uint32 tokens written by hand. */
  hid_t f = -1;
  st = td_h5_create(path_of("u32.h5"), MPI_COMM_NULL, &f);
  if (st == TD_OK) st = td_h5_write(f, "/tokens", H5T_NATIVE_UINT32, 1, &n, tok);
  if (st == TD_OK) st = td_h5_attr_write_i64(f, "vocab_size", 128256);
  if (st == TD_OK) st = td_h5_attr_write_str(f, "tokenizer", "llama3");
  td_h5_close(&f);
  if (st == TD_OK) st = td_dataset_open(path_of("u32.h5"), TD_SPLIT_TRAIN, 128256, &d);
  ok = st == TD_OK && td_dataset_ntokens(d) == n;
  if (ok) ok = td_dataset_read_window(d, 3, T, win) == TD_OK;
  for (int k = 0; ok && k <= T; ++k) ok = (uint32_t)win[k] == tok[3 * T + k];
  check(ok, "trident-hdf5 uint32 tokens: window exact");
  td_dataset_close(&d);

  /* Bad files: TD_ERR_DATA and the file's name in the message. */
  check_err(td_dataset_open(path_of("nothere.bin"), TD_SPLIT_TRAIN, 256, &d),
            TD_ERR_DATA, "nothere.bin", "missing file");
  write_file(path_of("empty.bin"), "", 0);
  check_err(td_dataset_open(path_of("empty.bin"), TD_SPLIT_TRAIN, 256, &d),
            TD_ERR_DATA, "empty.bin", "empty file");
  write_file(path_of("odd.bin"), flat, 2 * 100 + 1);
  check_err(td_dataset_open(path_of("odd.bin"), TD_SPLIT_TRAIN, 50257, &d),
            TD_ERR_DATA, "odd.bin", "odd byte count");
  write_llmc(path_of("short.bin"), 20240520, 1, (int32_t)n + 10, tok, n, 2);
  check_err(td_dataset_open(path_of("short.bin"), TD_SPLIT_TRAIN, 200000, &d),
            TD_ERR_DATA, "short.bin", "llm.c header says more tokens than the file has");
  write_llmc(path_of("long.bin"), 20240520, 1, (int32_t)n - 10, tok, n, 2);
  check_err(td_dataset_open(path_of("long.bin"), TD_SPLIT_TRAIN, 200000, &d),
            TD_ERR_DATA, "long.bin", "llm.c header says fewer tokens than the file has");
  write_llmc(path_of("version.bin"), 20240520, 2, (int32_t)n, tok, n, 2);
  check_err(td_dataset_open(path_of("version.bin"), TD_SPLIT_TRAIN, 200000, &d),
            TD_ERR_DATA, "version.bin", "llm.c wrong version");
  write_llmc(path_of("version7.bin"), 20240801, 1, (int32_t)n, tok, n, 4);
  check_err(td_dataset_open(path_of("version7.bin"), TD_SPLIT_TRAIN, 200000, &d),
            TD_ERR_DATA, "version7.bin", "llm.c LLaMA-3 magic with wrong version");
  unsigned char hdr[100] = {0};
  le32w(hdr, 20240520);
  le32w(hdr + 4, 1);
  write_file(path_of("hdr.bin"), hdr, sizeof hdr);
  check_err(td_dataset_open(path_of("hdr.bin"), TD_SPLIT_TRAIN, 256, &d),
            TD_ERR_DATA, "hdr.bin", "llm.c header cut short");
  unsigned char sig[16] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n', 1, 2, 3};
  write_file(path_of("damaged.h5"), sig, sizeof sig);
  check_err(td_dataset_open(path_of("damaged.h5"), TD_SPLIT_TRAIN, 256, &d),
            TD_ERR_DATA, "damaged.h5", "HDF5 signature, damaged file");

  st = td_h5_create(path_of("notokens.h5"), MPI_COMM_NULL, &f);
  if (st == TD_OK) st = td_h5_write(f, "/other", H5T_NATIVE_UINT32, 1, &n, tok);
  td_h5_close(&f);
  check_err(st == TD_OK ? td_dataset_open(path_of("notokens.h5"), TD_SPLIT_TRAIN, 256, &d) : st,
            TD_ERR_DATA, "notokens.h5", "HDF5 file without /tokens");

  float *ft = malloc((size_t)n * sizeof *ft);
  for (int64_t i = 0; i < n; ++i) ft[i] = (float)(i % 256);
  st = td_h5_create(path_of("float.h5"), MPI_COMM_NULL, &f);
  if (st == TD_OK) st = td_h5_write(f, "/tokens", H5T_NATIVE_FLOAT, 1, &n, ft);
  td_h5_close(&f);
  check_err(st == TD_OK ? td_dataset_open(path_of("float.h5"), TD_SPLIT_TRAIN, 256, &d) : st,
            TD_ERR_DATA, "float.h5", "HDF5 float tokens");
  int64_t dims2[2] = {10, 100};
  st = td_h5_create(path_of("rank2.h5"), MPI_COMM_NULL, &f);
  if (st == TD_OK) st = td_h5_write(f, "/tokens", H5T_NATIVE_UINT32, 2, dims2, tok);
  td_h5_close(&f);
  check_err(st == TD_OK ? td_dataset_open(path_of("rank2.h5"), TD_SPLIT_TRAIN, 256, &d) : st,
            TD_ERR_DATA, "rank2.h5", "HDF5 2-D tokens");
  check_err(td_dataset_open(path_of("u32.h5"), TD_SPLIT_TRAIN, 50257, &d), TD_ERR_DATA,
            "u32.h5", "HDF5 vocab_size attribute > deck vocab_size");
  free(ft);
  free(flat);
  free(tok);
}

/* ---- sampler ---------------------------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static void test_sampler(void) {
  const uint64_t seed = 1234;
  const int64_t nw = 103, G = 24, steps = 20; /* 4 steps an epoch, 7 dropped */
  td_sampler *s = NULL;
  int64_t *ref = malloc((size_t)(steps * G) * sizeof *ref);
  td_status st = td_sampler_create(seed, nw, &s);
  for (int64_t k = 0; st == TD_OK && k < steps; ++k) st = td_sampler_next(s, G, ref + k * G);
  check(st == TD_OK, "sampler: %lld steps of %lld from %lld windows", (long long)steps,
        (long long)G, (long long)nw);
  int64_t ep = -1, pos = -1;
  td_sampler_state(s, &ep, &pos);
  /* 4 steps an epoch: step 20 ends epoch 4; epoch 5 starts on the next call. */
  check(ep == 4 && pos == 4 * G, "sampler: state after 20 steps is epoch 4, position 96 (got %lld, %lld)",
        (long long)ep, (long long)pos);
  td_sampler_destroy(&s);
  check(s == NULL, "td_sampler_destroy sets NULL");

  /* Within an epoch, no window twice; all in range. */
  int ok = 1;
  int64_t per = nw / G;
  for (int64_t e = 0; ok && e < steps / per; ++e) {
    char seen[103] = {0};
    for (int64_t k = 0; ok && k < per * G; ++k) {
      int64_t w = ref[e * per * G + k];
      ok = w >= 0 && w < nw && !seen[w];
      if (ok) seen[w] = 1;
    }
  }
  check(ok, "sampler: no window twice within an epoch (remainder dropped)");

  /* nwindows a multiple of G: every window exactly once per epoch. */
  int64_t nw2 = 96, *all = malloc(96 * sizeof *all);
  st = td_sampler_create(seed, nw2, &s);
  ok = st == TD_OK;
  for (int e = 0; ok && e < 3; ++e) {
    for (int k = 0; ok && k < 4; ++k) ok = td_sampler_next(s, 24, all + 24 * k) == TD_OK;
    qsort(all, 96, sizeof *all, cmp_i64);
    for (int64_t i = 0; ok && i < 96; ++i) ok = all[i] == i;
  }
  check(ok, "sampler: every window exactly once per epoch (3 epochs of 96)");
  td_sampler_destroy(&s);
  free(all);

  /* Epochs differ; seeds differ; not the identity. */
  check(memcmp(ref, ref + per * G, (size_t)(per * G) * sizeof *ref) != 0,
        "sampler: epoch 1 order differs from epoch 0");
  int64_t other[24];
  st = td_sampler_create(seed + 1, nw, &s);
  if (st == TD_OK) st = td_sampler_next(s, G, other);
  td_sampler_destroy(&s);
  check(st == TD_OK && memcmp(other, ref, sizeof other) != 0, "sampler: another seed, another order");
  int ident = 1;
  for (int64_t k = 0; k < G; ++k) ident &= ref[k] == k;
  check(!ident, "sampler: epoch 0 is shuffled");

  /* Grid invariance: each data-parallel rank has its own sampler and takes
   * its slice, micro-batch by micro-batch; the multiset of each step (and
   * the order of the concatenation) equals the reference. */
  const int dps[] = {1, 2, 4}, mbs[] = {1, 2, 3, 6};
  for (int a = 0; a < 3; ++a) {
    for (int b = 0; b < 4; ++b) {
      int dp = dps[a], mb = mbs[b];
      int64_t per_rank = G / dp;
      if (per_rank % mb) continue;
      int same_order = 1, same_set = 1;
      td_sampler *rs[4] = {NULL};
      for (int r = 0; r < dp; ++r) td_sampler_create(seed, nw, &rs[r]);
      int64_t glob[24], got[24], want[24];
      for (int64_t k = 0; k < steps; ++k) {
        int64_t u = 0;
        for (int r = 0; r < dp; ++r) {
          if (td_sampler_next(rs[r], G, glob) != TD_OK) same_set = 0;
          const int64_t *mine = glob + r * G / dp; /* [r·G/dp, (r+1)·G/dp) */
          for (int64_t m = 0; m < per_rank / mb; ++m)
            for (int64_t j = 0; j < mb; ++j) got[u++] = mine[m * mb + j];
        }
        same_order &= memcmp(got, ref + k * G, sizeof got) == 0;
        memcpy(want, ref + k * G, sizeof want);
        qsort(got, 24, sizeof *got, cmp_i64);
        qsort(want, 24, sizeof *want, cmp_i64);
        same_set &= memcmp(got, want, sizeof got) == 0;
      }
      for (int r = 0; r < dp; ++r) td_sampler_destroy(&rs[r]);
      check(same_set && same_order,
            "sampler: dp %d, micro-batch %d: every step's windows equal the reference", dp, mb);
    }
  }

  /* Save/restore continues the exact sequence, across an epoch boundary. */
  for (int64_t at = 3; at <= 13; at += 5) {
    st = td_sampler_create(seed, nw, &s);
    int64_t buf[24];
    for (int64_t k = 0; st == TD_OK && k < at; ++k) st = td_sampler_next(s, G, buf);
    td_sampler_state(s, &ep, &pos);
    td_sampler_destroy(&s);
    td_sampler *t = NULL;
    if (st == TD_OK) st = td_sampler_create(seed, nw, &t);
    if (st == TD_OK) st = td_sampler_restore(t, ep, pos);
    ok = st == TD_OK;
    for (int64_t k = at; ok && k < steps; ++k) {
      ok = td_sampler_next(t, G, buf) == TD_OK && memcmp(buf, ref + k * G, sizeof buf) == 0;
    }
    check(ok, "sampler: restore (epoch %lld, position %lld) after %lld steps continues exactly",
          (long long)ep, (long long)pos, (long long)at);
    if (t) {
      check_err(td_sampler_restore(t, 0, nw + 1), TD_ERR_CKPT, "position",
                "sampler: restore of a position past the end");
    }
    td_sampler_destroy(&t);
  }
  st = td_sampler_create(seed, nw, &s);
  int64_t big[104];
  check_err(st == TD_OK ? td_sampler_next(s, nw + 1, big) : st, TD_ERR_DATA, "global batch",
            "sampler: global batch larger than the dataset");
  td_sampler_destroy(&s);
  free(ref);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  if (argc < 2) {
    fprintf(stderr, "usage: %s TMPDIR\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  g_dir = argv[1];
  if (mkdir(g_dir, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "cannot create %s: %s\n", g_dir, strerror(errno));
    MPI_Finalize();
    return 2;
  }
  td_h5_init();
  test_h5();
  test_prepare();
  test_readers();
  test_sampler();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  MPI_Finalize();
  return g_fail ? 1 : 0;
}
