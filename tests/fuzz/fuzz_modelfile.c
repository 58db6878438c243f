/* fuzz_modelfile.c — libFuzzer harness for the files users download as
 * pretrained weights (model.init_from, io/model_file.c): safetensors, llm.c
 * model files and Hugging Face model folders (model.safetensors.index.json
 * naming shards, config.json).
 *
 * Input: byte 0 picks the mode (bit 0). Mode 0: the rest is one file,
 * opened with td_model_file_open. Mode 1: the rest is split at each
 * "\0\xff" into model.safetensors.index.json, the shards "a.safetensors"
 * and "b.safetensors", and config.json, written into a folder that is
 * opened as a model folder (and its config.json read). Every outcome must
 * be TD_OK or TD_ERR_DATA (exit 2) whose message names a file of the
 * scratch folder; TD_ERR_NOMEM means an allocation beyond what the files
 * hold (ASan's allocator returns NULL above its limit) and is a finding, as
 * are crashes, hangs and sanitizer reports. A file that opens holds no more
 * float32 elements than its bytes allow. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_util.h"
#include "io/td_model_file.h"

static const char *const k_names[] = {"model.safetensors.index.json", "a.safetensors",
                                      "b.safetensors", "config.json"};

static void check(td_status st, const char *what) {
  if (st == TD_OK) return;
  const char *msg = td_error_message();
  if (st != TD_ERR_DATA || !strstr(msg, td_fuzz_dir())) {
    fprintf(stderr, "fuzz_modelfile: %s: status %s, message: %s\n", what, td_status_name(st), msg);
    abort();
  }
  td_error_clear();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int folder = data[0] & 1;
  const uint8_t *p = data + 1, *end = data + size;
  td_fuzz_clear(td_fuzz_dir());
  char path[512];
  size_t total = 0;
  if (!folder) {
    td_fuzz_path(path, sizeof path, "model.bin");
    td_fuzz_write(path, p, (size_t)(end - p));
    total = (size_t)(end - p);
  } else {
    td_fuzz_path(path, sizeof path, "hf");
    mkdir(path, 0700);
    for (int k = 0; k < 4; ++k) {
      const uint8_t *q = p;
      while (q + 1 < end && !(q[0] == 0 && q[1] == 0xff)) ++q;
      if (q + 1 >= end) q = end;
      char f[640];
      snprintf(f, sizeof f, "%s/%s", path, k_names[k]);
      td_fuzz_write(f, p, (size_t)(q - p));
      total += (size_t)(q - p);
      p = q < end ? q + 2 : end;
    }
    td_hf_config c;
    int found = 0;
    check(td_model_file_hf_config(path, &c, &found), "config.json");
  }
  td_model_file *m = NULL;
  td_status st = td_model_file_open(path, &m);
  check(st, "open");
  if (st == TD_OK) {
    /* the tensors' elements fit in what was read (bf16 widens 2 bytes to 4) */
    static const char *const probe[] = {"wte.weight", "wpe.weight", "h.0.attn.c_attn.weight",
                                        "ln_f.weight", "model.embed_tokens.weight"};
    for (int i = 0; i < 5; ++i) {
      int nd = 0;
      int64_t sh[2] = {0, 0};
      if (td_model_file_tensor(m, probe[i], &nd, sh) && sh[0] > 0 && sh[1] > 0 &&
          (double)sh[0] * (double)sh[1] > (double)total) {
        fprintf(stderr, "fuzz_modelfile: %s holds %lld x %lld elements from %zu bytes\n",
                probe[i], (long long)sh[0], (long long)sh[1], total);
        abort();
      }
    }
    for (int i = 0; td_model_file_unused(m, i); ++i) {
    }
  }
  td_model_file_close(&m);
  return 0;
}
