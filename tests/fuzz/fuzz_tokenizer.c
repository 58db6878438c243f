/* fuzz_tokenizer.c — libFuzzer harness for the GPT-2 tokenizer's files as a
 * user downloads them (io/bpe.c: encoder.json and vocab.bpe, `trident
 * prepare --tokenizer gpt2 --vocab --merges`).
 *
 * Input: split at the first two "\0\xff" into encoder.json, vocab.bpe and a
 * text. The files are written to the scratch folder and loaded with
 * td_bpe_load: the outcome must be TD_OK or TD_ERR_DATA (exit 2) whose
 * message names one of the two files; TD_ERR_NOMEM means an allocation
 * beyond what the files hold and is a finding, as are crashes, hangs and
 * sanitizer reports. A tokenizer that loads encodes the text, and every id
 * it gives decodes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "io/td_bpe.h"

static void fail(const char *what, td_status st) {
  fprintf(stderr, "fuzz_tokenizer: %s: status %s, message: %s\n", what, td_status_name(st),
          td_error_message());
  abort();
}

/* The next piece of [*p, end) up to "\0\xff" (or the end). */
static size_t piece(const uint8_t **p, const uint8_t *end, const uint8_t **start) {
  const uint8_t *q = *p;
  while (q + 1 < end && !(q[0] == 0 && q[1] == 0xff)) ++q;
  if (q + 1 >= end) q = end;
  *start = *p;
  size_t n = (size_t)(q - *p);
  *p = q < end ? q + 2 : end;
  return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *p = data, *end = data + size, *enc, *mer, *text;
  size_t ne = piece(&p, end, &enc), nm = piece(&p, end, &mer), nt = piece(&p, end, &text);
  char ej[512], vb[512];
  td_fuzz_path(ej, sizeof ej, "encoder.json");
  td_fuzz_path(vb, sizeof vb, "vocab.bpe");
  td_fuzz_write(ej, enc, ne);
  td_fuzz_write(vb, mer, nm);
  td_bpe *b = NULL;
  td_status st = td_bpe_load(ej, vb, &b);
  if (st != TD_OK) {
    const char *msg = td_error_message();
    if (st != TD_ERR_DATA || (!strstr(msg, ej) && !strstr(msg, vb))) fail("load", st);
    td_error_clear();
    return 0;
  }
  int32_t *ids = NULL;
  size_t nids = 0, cap = 0;
  st = td_bpe_encode(b, text, nt, &ids, &nids, &cap);
  if (st != TD_OK) fail("encode", st);
  char *out = NULL;
  size_t len = 0;
  st = td_bpe_decode(b, ids, nids, &out, &len);
  if (st != TD_OK) fail("decode of the ids encode gave", st);
  free(out);
  free(ids);
  td_bpe_destroy(&b);
  return 0;
}
