/* fuzz_records.c — libFuzzer harness for the JSON Lines and chat readers
 * (io/json.c, io/prepare_records.c: `trident prepare --format jsonl|chat`)
 * with the byte tokenizer, and for the dataset that comes out.
 *
 * Input: byte 0 picks the format (bit 0: chat or jsonl), --skip-bad (bit 1)
 * and the val fraction (bits 2-3); the rest is the file. The outcome must be
 * TD_OK, or TD_ERR_DATA / TD_ERR_USAGE whose message names the file (no
 * record, a malformed line); TD_ERR_NOMEM is a finding (the reader holds the
 * tokens, 5 bytes each, a bounded multiple of the file), as are crashes,
 * hangs and sanitizer reports. A dataset that is written opens, and its
 * every window's tokens, mask and document starts read back, each document
 * start inside [0, its position]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "io/td_dataset.h"
#include "io/td_h5.h"
#include "io/td_prepare.h"

static const double k_val[] = {0.0, 0.1, 0.5, 0.9};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  td_h5_init();
  return 0;
}

static void die(const char *what, td_status st) {
  fprintf(stderr, "fuzz_records: %s: status %s, message: %s\n", what, td_status_name(st),
          td_error_message());
  abort();
}

/* Every window of split s reads back, its document starts in range. */
static void read_back(const char *path, td_split s) {
  td_dataset *d = NULL;
  td_status st = td_dataset_open(path, s, 256, &d);
  if (st != TD_OK) die("the prepared dataset does not open", st);
  int64_t T = 7, nw = td_dataset_nwindows(d, T);
  int32_t tok[8], doc[8];
  uint8_t mask[8];
  for (int64_t i = 0; i < nw && i < 4096; ++i) {
    if ((st = td_dataset_read_window(d, i, T, tok)) != TD_OK) die("a window does not read", st);
    if ((st = td_dataset_read_meta(d, i, T, mask, doc)) != TD_OK) die("a window's meta", st);
    for (int k = 0; k <= T; ++k)
      if (doc[k] < 0 || doc[k] > k || mask[k] > 1) {
        fprintf(stderr, "fuzz_records: window %lld token %d: document start %d, mask %d\n",
                (long long)i, k, doc[k], mask[k]);
        abort();
      }
  }
  td_dataset_close(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  td_prepare_opts o = {(data[0] & 1) ? TD_PREPARE_CHAT : TD_PREPARE_JSONL, NULL, (data[0] >> 1) & 1};
  double vf = k_val[(data[0] >> 2) & 3];
  char in[512], out[512];
  td_fuzz_path(in, sizeof in, "records.jsonl");
  td_fuzz_path(out, sizeof out, "records.h5");
  td_fuzz_write(in, data + 1, size - 1);
  remove(out);
  char *inputs[1] = {in};
  td_status st = td_prepare_records(out, vf, 1, inputs, NULL, &o, NULL);
  if (st != TD_OK) {
    if ((st != TD_ERR_DATA && st != TD_ERR_USAGE) || !strstr(td_error_message(), in))
      die("prepare", st);
    td_error_clear();
    return 0;
  }
  read_back(out, TD_SPLIT_TRAIN);
  read_back(out, TD_SPLIT_VAL);
  return 0;
}
