/* td_model_file.h — pretrained GPT-2 weights from outside trident
 * (model.init_from):
 *   - safetensors (Hugging Face GPT-2, or `trident export`): tensors named
 *     "transformer.<name>" or "<name>" (h.N.attn.c_attn.weight, ...), Conv1D
 *     (in, out) layouts, F32 or BF16 (BF16 widened exactly); "lm_head.weight"
 *     (tied) and the attention mask buffers "h.N.attn.bias"/"masked_bias" of
 *     older exports are ignored. The header is parsed with cJSON.
 *   - llm.c's model file (gpt2_124M.bin): a 256-int32 header (magic
 *     20240326, version 3 = fp32, 5 = bf16; max_seq_len, vocab, layers,
 *     heads, channels, padded vocab) then the tensors in llm.c's order with
 *     nn.Linear (out, in) layouts, transposed here to trident's (in, out);
 *     the padded vocabulary rows past vocab are dropped.
 * Every tensor ends up float32 in trident's global logical layout, looked up
 * by its registry name. */
#ifndef TD_MODEL_FILE_H
#define TD_MODEL_FILE_H

#include <stdint.h>

#include "td_error.h"

typedef struct td_model_file td_model_file;

/* Read the file at path (format recognised by content), or a Hugging Face
 * model folder: its model.safetensors, or the shards its
 * model.safetensors.index.json names (weight_map: tensor -> shard file of
 * the folder; every shard read, every tensor in the shard the map says). A
 * folder with neither is TD_ERR_DATA saying what was looked for. Errors name
 * the file and the place: TD_ERR_DATA for malformed content, TD_ERR_IO. */
td_status td_model_file_open(const char *path, td_model_file **out);
void td_model_file_close(td_model_file **m);
/* The tensor `name` (registry name, e.g. "h.0.ln_1.weight") as float32 in
 * trident's layout, with its shape; NULL if the file has none. Owned by m. */
const float *td_model_file_tensor(const td_model_file *m, const char *name, int *ndim,
                                  int64_t shape[2]);
/* Names in the file that no call to td_model_file_tensor asked for (extra
 * tensors), one at a time: index i of the unused ones, or NULL past the end. */
const char *td_model_file_unused(const td_model_file *m, int i);
/* "safetensors", "sharded safetensors" or "llm.c". */
const char *td_model_file_format(const td_model_file *m);

/* A model folder's config.json (Hugging Face's), its numeric keys: GPT-2's
 * vocab_size n_embd n_layer n_head n_positions, LLaMA's vocab_size
 * hidden_size num_hidden_layers num_attention_heads num_key_value_heads
 * intermediate_size max_position_embeddings (v[i] for td_hf_keys[i]; -1:
 * absent). *found = 0 when path is not a folder or has no config.json. */
enum { TD_HF_NKEYS = 13 };
extern const char *const td_hf_keys[TD_HF_NKEYS];
typedef struct {
  char path[4200];
  char model_type[32];
  double v[TD_HF_NKEYS];
} td_hf_config;
td_status td_model_file_hf_config(const char *path, td_hf_config *c, int *found);

#endif
