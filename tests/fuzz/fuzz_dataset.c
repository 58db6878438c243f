/* fuzz_dataset.c — libFuzzer harness for the token dataset readers
 * (io/dataset.c): trident HDF5 files, llm.c and nanoGPT .bin files.
 *
 * Input: byte 0 picks the window length T = 1 + b0 % 16 and the split (bit
 * 7: VAL), byte 1 the deck's vocab_size; the rest is the file, written to a
 * scratch file on tmpfs (the reader opens paths). A file that opens must
 * read every window (up to 256 of them: the first and last 128 when there
 * are more) without a crash; errors must be TD_ERR_DATA (or TD_ERR_IO). */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "io/td_dataset.h"
#include "io/td_h5.h"

static const int64_t k_vocab[] = {256, 2, 65536, 50257, 128256, 2147483647, 1, 300};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  td_h5_init();
  return 0;
}

static void expect_data_error(const char *what) {
  td_status s = td_error_status();
  if (s != TD_ERR_DATA && s != TD_ERR_IO) {
    fprintf(stderr, "fuzz_dataset: %s gave %s: %s\n", what, td_status_name(s),
            td_error_message());
    abort();
  }
  td_error_clear();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  int64_t T = 1 + data[0] % 16;
  td_split split = (data[0] & 0x80) ? TD_SPLIT_VAL : TD_SPLIT_TRAIN;
  int64_t vocab = k_vocab[data[1] % (sizeof k_vocab / sizeof k_vocab[0])];
  char path[512];
  td_fuzz_path(path, sizeof path, "tokens.bin");
  td_fuzz_write(path, data + 2, size - 2);

  td_dataset *d = NULL;
  if (td_dataset_open(path, split, vocab, &d) != TD_OK) {
    expect_data_error("td_dataset_open");
    return 0;
  }
  int64_t nw = td_dataset_nwindows(d, T);
  if (td_dataset_ntokens(d) < 1 || nw < 0 || nw > td_dataset_ntokens(d)) abort();
  if (td_dataset_require_windows(d, T, 1, "fuzz") != TD_OK) expect_data_error("require_windows");
  int32_t *win = calloc((size_t)T + 1, sizeof *win);
  for (int64_t i = 0; win && i < nw; ++i) {
    if (i == 128 && nw > 256) i = nw - 128;
    if (td_dataset_read_window(d, i, T, win) != TD_OK) {
      expect_data_error("td_dataset_read_window");
      continue;
    }
    for (int64_t k = 0; k <= T; ++k)
      if (win[k] < 0 || win[k] >= vocab) {
        fprintf(stderr, "fuzz_dataset: window %lld token %lld = %d outside [0, %lld)\n",
                (long long)i, (long long)k, win[k], (long long)vocab);
        abort();
      }
  }
  free(win);
  td_dataset_close(&d);
  return 0;
}
