/* fuzz_prepare.c — libFuzzer harness for `trident prepare` (io/prepare.c):
 * text bytes in, a trident HDF5 dataset out, read back and compared.
 *
 * Input: byte 0 picks val_fraction (bits 0-1), the read buffer (bits 2-3),
 * and whether the pieces are given as files or as one folder (bit 4); the
 * rest is split at each "\0\xff" into up to 8 pieces, written as files f0,
 * f1, ... (in a folder: f0 at the top, the others one level down, sub/fK).
 * The dataset must hold exactly the bytes in order (folders sorted by name),
 * the last floor(n · val_fraction) of them in /val_tokens; inputs with no
 * bytes must give TD_ERR_USAGE. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_util.h"
#include "io/td_dataset.h"
#include "io/td_h5.h"
#include "io/td_prepare.h"

#define MAX_PIECES 8

static const double k_val[] = {0.0, 0.1, 0.5, 0.9};
static const size_t k_buffer[] = {0, 48, 97, 4096};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  td_h5_init();
  return 0;
}

static void die(const char *what) {
  fprintf(stderr, "fuzz_prepare: %s\n%s\n", what, td_error_message());
  abort();
}

/* Read tokens of split `s` of path into out (n of them). */
static void read_all(const char *path, td_split s, int64_t n, const uint8_t *want) {
  td_dataset *d = NULL;
  if (td_dataset_open(path, s, 256, &d) != TD_OK) die("the prepared dataset does not open");
  if (td_dataset_ntokens(d) != n) {
    fprintf(stderr, "fuzz_prepare: %s has %lld tokens, expected %lld\n",
            s == TD_SPLIT_VAL ? "val" : "train", (long long)td_dataset_ntokens(d), (long long)n);
    abort();
  }
  if (n >= 2) {
    int32_t *w = malloc((size_t)n * sizeof *w);
    if (!w) abort();
    if (td_dataset_read_window(d, 0, n - 1, w) != TD_OK) die("cannot read the prepared tokens");
    for (int64_t i = 0; i < n; ++i)
      if (w[i] != want[i]) {
        fprintf(stderr, "fuzz_prepare: token %lld is %d, expected %d\n", (long long)i, w[i],
                want[i]);
        abort();
      }
    free(w);
  }
  td_dataset_close(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  double vf = k_val[data[0] & 3];
  size_t bufsize = k_buffer[(data[0] >> 2) & 3];
  int folder = (data[0] >> 4) & 1;
  const uint8_t *p = data + 1, *end = data + size;

  char dir[512], in[512], out[512], name[600];
  td_fuzz_path(dir, sizeof dir, "in");
  td_fuzz_path(out, sizeof out, "out.h5");
  td_fuzz_clear(td_fuzz_dir());
  mkdir(dir, 0700);
  snprintf(name, sizeof name, "%s/sub", dir);
  mkdir(name, 0700);

  char *inputs[MAX_PIECES];
  char paths[MAX_PIECES][600];
  uint8_t *all = malloc(size + 1); /* the bytes in the order prepare reads them */
  if (!all) return 0;
  size_t nall = 0;
  int npieces = 0;
  while (npieces < MAX_PIECES) {
    const uint8_t *q = p;
    while (q + 1 < end && !(q[0] == 0 && q[1] == 0xff)) ++q;
    if (q + 1 >= end || npieces == MAX_PIECES - 1) q = end;
    if (folder && npieces > 0)
      snprintf(paths[npieces], sizeof paths[npieces], "%s/sub/f%d", dir, npieces);
    else
      snprintf(paths[npieces], sizeof paths[npieces], "%s/f%d", dir, npieces);
    td_fuzz_write(paths[npieces], p, (size_t)(q - p));
    memcpy(all + nall, p, (size_t)(q - p));
    nall += (size_t)(q - p);
    inputs[npieces] = paths[npieces];
    ++npieces;
    if (q >= end) break;
    p = q + 2;
  }
  /* A folder lists f0 before sub/ ("f" < "s"), and sub/f1 ... in order. */
  snprintf(in, sizeof in, "%s", dir);
  char *folder_arg[1] = {in};
  td_status st = folder ? td_prepare(out, vf, 1, folder_arg, bufsize, NULL)
                        : td_prepare(out, vf, npieces, inputs, bufsize, NULL);
  if (nall == 0) {
    if (st != TD_ERR_USAGE) die("empty input did not give TD_ERR_USAGE");
    td_error_clear();
    free(all);
    return 0;
  }
  if (st != TD_OK) die("td_prepare failed on readable input");
  int64_t nval = (int64_t)floor((double)nall * vf);
  read_all(out, TD_SPLIT_TRAIN, (int64_t)nall - nval, all);
  if (nval > 0) read_all(out, TD_SPLIT_VAL, nval, all + nall - nval);
  struct stat sb;
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.tmp", out);
  if (stat(tmp, &sb) == 0) die("the temporary file was left behind");
  free(all);
  return 0;
}
