/* fuzz_llama3.c — libFuzzer harness for LLaMA 3's tokenizer files as a user
 * downloads them (io/bpe_llama3.c and io/json.c: Meta's tokenizer.model and
 * Hugging Face's tokenizer.json, `trident prepare --tokenizer llama3
 * --vocab FILE`), and for the text it then encodes.
 *
 * Input: split at the first "\0\xff" into the file and a text. The file is
 * written to the scratch folder and loaded with td_bpe_load_llama3: the
 * outcome must be TD_OK or TD_ERR_DATA (exit 2) whose message names the
 * file; TD_ERR_NOMEM is a finding (the readers allocate in proportion to the
 * file), as are crashes, hangs and sanitizer reports. A tokenizer that loads
 * encodes the text with and without special tokens, and every id decodes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "io/td_bpe.h"

static void fail(const char *what, td_status st) {
  fprintf(stderr, "fuzz_llama3: %s: status %s, message: %s\n", what, td_status_name(st),
          td_error_message());
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t nf = 0;
  while (nf + 1 < size && !(data[nf] == 0 && data[nf + 1] == 0xff)) ++nf;
  if (nf + 1 >= size) nf = size;
  const uint8_t *text = nf < size ? data + nf + 2 : data + size;
  size_t nt = (size_t)(data + size - text);
  char path[512];
  td_fuzz_path(path, sizeof path, "tokenizer.model");
  td_fuzz_write(path, data, nf);
  td_bpe *b = NULL;
  td_status st = td_bpe_load_llama3(path, TD_BPE_LLAMA3, &b);
  if (st != TD_OK) {
    if (st != TD_ERR_DATA || !strstr(td_error_message(), path)) fail("load", st);
    td_error_clear();
    return 0;
  }
  for (int specials = 0; specials < 2; specials++) {
    int32_t *ids = NULL;
    size_t nids = 0, cap = 0;
    st = td_bpe_encode_text(b, text, nt, specials, &ids, &nids, &cap);
    if (st != TD_OK) fail("encode", st);
    char *out = NULL;
    size_t len = 0;
    st = td_bpe_decode(b, ids, nids, &out, &len);
    if (st != TD_OK) fail("decode of the ids encode gave", st);
    free(out);
    free(ids);
  }
  td_bpe_destroy(&b);
  return 0;
}
