/* td_config.h — the job deck: one schema table, one typed config.
 *
 * TD_DECK_SCHEMA is the only description of the deck. It declares the fields
 * of td_config, drives parsing, range checks, --set overrides, the resolved-deck
 * printer, `trident check --schema` and the deck reference in docs/decks.md.
 *
 * X(section, key, type, default, min, max, choices, flags, doc)
 *   type     INT (int64_t), FLOAT (double), STR (char[TD_STR_MAX]), BOOL (int),
 *            INTS / FLOATS (lists, up to TD_LIST_MAX, with a _count field)
 *   default  text parsed like a deck value ("" for STR means empty; REQ flag
 *            means the key must be given)
 *   min/max  inclusive range for numbers and list elements, and list lengths
 *            for lists via the LEN2 flag
 *   choices  "a|b|c" or NULL */
#ifndef TD_CONFIG_H
#define TD_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "td_error.h"

#define TD_STR_MAX 512
#define TD_LIST_MAX 256
#define TD_BIG 9.0e18

#define TD_F_REQ 1u  /* required key */
#define TD_F_LEN2 2u /* list of exactly two elements */
#define TD_F_HOW 4u  /* how the run saves, never what it computes: left out of a
                        checkpoint's /config (td_config_to_text), so a checkpoint is
                        the same file whichever way it was written */

#define TD_DECK_SCHEMA(X)                                                                   \
  X(run, name, STR, "trident", 0, 0, NULL, 0, "run name, used in default paths")             \
  X(run, seed, INT, "1234", 0, TD_BIG, NULL, 0, "seed of every random draw (init, data order)") \
  X(run, device, STR, "cpu", 0, 0, "cpu|cuda", 0, "compute back-end")                          \
  X(run, out_dir, STR, "", 0, 0, NULL, 0, "output folder (default runs/<name>)")               \
  X(run, threads, INT, "0", 0, 4096, NULL, 0,                                                \
    "OpenMP threads per rank (0: OMP_NUM_THREADS, else cores / ranks on the node)")          \
  X(run, watchdog_s, INT, "600", 0, 31536000, NULL, 0,                                         \
    "end the job (exit 3) when a rank waits this long in one communication call (0: off)")  \
  X(model, arch, STR, "gpt2", 0, 0, "gpt2|llama", 0,                                        \
    "model family: gpt2 (LayerNorm, learned positions, GELU) or llama (RMSNorm, RoPE, "      \
    "grouped-query attention, SwiGLU, no biases)")                                           \
  X(model, vocab_size, INT, "", 2, 2147483647, NULL, TD_F_REQ, "vocabulary size V")          \
  X(model, seq_len, INT, "", 1, 1048576, NULL, TD_F_REQ, "context length T")                 \
  X(model, layers, INT, "", 1, 100000, NULL, TD_F_REQ, "transformer blocks")                 \
  X(model, dim, INT, "", 1, 1048576, NULL, TD_F_REQ, "model width C")                        \
  X(model, heads, INT, "", 1, 65536, NULL, TD_F_REQ, "attention heads (C % heads == 0)")     \
  X(model, kv_heads, INT, "0", 0, 65536, NULL, 0,                                           \
    "key/value heads of grouped-query attention (llama; 0: model.heads)")                   \
  X(model, ffn_dim, INT, "0", 0, 4194304, NULL, 0,                                           \
    "MLP hidden width (llama: required; gpt2: 4·model.dim, leave 0)")                        \
  X(model, norm_eps, FLOAT, "1.0e-5", 1.0e-12, 1, NULL, 0, "RMSNorm epsilon (llama)")        \
  X(model, rope_theta, FLOAT, "10000", 1, 1.0e12, NULL, 0, "rotary embedding base (llama)")  \
  X(model, tie_embeddings, STR, "auto", 0, 0, "auto|true|false", 0,                          \
    "the output head is the token embedding (auto: gpt2 true, llama false)")                 \
  X(model, attention, STR, "fused", 0, 0, "fused|materialized", 0,                   \
    "attention kernels: fused (FlashAttention-2: keeps one log-sum-exp per query row, "     \
    "recomputes the probabilities in backward) or materialized (keeps the (B, heads, T, T) " \
    "probabilities)")                                                                        \
  X(model, head, STR, "fused", 0, 0, "fused|materialized", 0,                        \
    "output head and cross-entropy: fused (logits, loss and gradient in chunks of "          \
    "model.head_chunk rows, recomputed in backward) or materialized (keeps the (B·T, V/tp) " \
    "float32 logits)")                                                                       \
  X(model, head_chunk, INT, "256", 1, 1048576, NULL, 0,                                      \
    "rows of logits the fused head holds at once: (head_chunk, V/tp) float32")               \
  X(model, moe_experts, INT, "0", 0, 65536, NULL, 0,                                        \
    "mixture of experts (model.moe: a mapping): experts of each sparse block's feed-forward " \
    "layer (0: a dense model; otherwise at least 2)")                                        \
  X(model, moe_top_k, INT, "2", 1, 65536, NULL, 0,                                           \
    "experts each token goes to (at most model.moe.experts)")                               \
  X(model, moe_every, INT, "1", 1, 100000, NULL, 0,                                          \
    "every n-th block is sparse: blocks n-1, 2n-1, ... (1: all)")                           \
  X(model, moe_ffn_dim, INT, "0", 0, 4194304, NULL, 0,                                       \
    "an expert's hidden width (0: the dense MLP's: model.ffn_dim, gpt2 4·model.dim)")          \
  X(model, moe_aux_loss, FLOAT, "0.01", 0, 1.0e6, NULL, 0,                                   \
    "weight α of the load-balancing loss α·E·Σ f_i·P_i (per sequence and sparse block, "    \
    "averaged), added to the loss minimised")                                               \
  X(model, moe_z_loss, FLOAT, "0.0", 0, 1.0e6, NULL, 0,                                      \
    "weight β of the router z-loss β·mean(logsumexp(router logits)²)")                     \
  X(model, moe_capacity_factor, FLOAT, "0.0", 0, 1.0e6, NULL, 0,                             \
    "0: dropless (every token reaches its top_k experts); c > 0: in each sequence an "       \
    "expert keeps the first ⌈c·seq_len·top_k/experts⌉ slots routed to it (position order) " \
    "and drops the rest")                                                                    \
  X(model, init_from, STR, "", 0, 0, NULL, 0,                                                \
    "start from these weights: safetensors (Hugging Face, trident export), a model folder "  \
    "(model.safetensors or a sharded index, config.json checked) or llm.c .bin; empty: random") \
  X(parallel, dp, INT, "1", 1, 1048576, NULL, 0, "data-parallel size")                        \
  X(parallel, cp, INT, "1", 1, 4096, NULL, 0,                                                \
    "context-parallel size: ranks that split every sequence into 2·cp chunks (model.seq_len "  \
    "divisible by 2·cp), keys and values all-gathered for attention")                        \
  X(parallel, tp, INT, "1", 1, 4096, NULL, 0, "tensor-parallel size")                         \
  X(parallel, ep, INT, "1", 1, 4096, NULL, 0,                                                \
    "expert-parallel size: ranks of the dp × cp group that split model.moe's experts "       \
    "(experts/ep each; dp·cp divisible by ep), tokens sent to their experts all-to-all")     \
  X(parallel, pp, INT, "1", 1, 4096, NULL, 0, "pipeline-parallel size (stages)")              \
  X(parallel, zero, INT, "0", 0, 3, NULL, 0, "ZeRO stage: 0 none, 1 optimizer, 2 +gradients, 3 +parameters") \
  X(parallel, micro_batch, INT, "0", 0, TD_BIG, NULL, 0,                                      \
    "sequences per micro-batch per rank (0: global_batch / dp, no accumulation)")             \
  X(parallel, pp_schedule, STR, "1f1b", 0, 0, "gpipe|1f1b|interleaved|zb-h1", 0,            \
    "pipeline schedule: gpipe, 1f1b, interleaved 1F1B over parallel.virtual_stages chunks "  \
    "per stage, or zb-h1 (backward split into input and weight gradients)")                 \
  X(parallel, virtual_stages, INT, "1", 1, 4096, NULL, 0,                                    \
    "model chunks per pipeline stage (pp_schedule: interleaved, at least 2)")               \
  X(parallel, stage_layers, INTS, "[]", 0, 100000, NULL, 0,                                  \
    "layers per pipeline stage, or per model chunk when interleaved (default: even split; "  \
    "0 for the first chunk: the embedding alone, and the last: the head and loss alone)")    \
  X(parallel, sequence_parallel, BOOL, "false", 0, 0, NULL, 0,                               \
    "Megatron sequence parallelism: norms and residual stream split along the tokens over "  \
    "the tp group (needs parallel.tp > 1; model.seq_len divisible by tp)")                   \
  X(parallel, bucket_mb, FLOAT, "25", 0.001, 1.0e6, NULL, 0, "gradient all-reduce bucket size, MiB") \
  X(parallel, overlap_param_gather, BOOL, "true", 0, 0, NULL, 0,                            \
    "ZeRO 1-2: gather the updated parameters unit by unit during the next forward (false: " \
    "all of them right after the optimizer)")                                                \
  X(data, train, STR, "", 0, 0, NULL, TD_F_REQ, "training tokens (trident HDF5, nanoGPT or llm.c .bin)") \
  X(data, val, STR, "", 0, 0, NULL, 0, "validation tokens (default: data.train's /val_tokens)") \
  X(data, attend, STR, "causal", 0, 0, "causal|document", 0,                                  \
    "causal: every window is one stream; document: attention stays inside each document "     \
    "and positions restart at its start (the dataset's /documents; model.attention: fused)") \
  X(training, global_batch, INT, "", 1, TD_BIG, NULL, TD_F_REQ, "sequences per optimizer step") \
  X(training, steps, INT, "", 0, TD_BIG, NULL, TD_F_REQ, "optimizer steps")                   \
  X(training, precision, STR, "fp32", 0, 0, "fp32|bf16", 0, "compute precision")              \
  X(training, grad_clip, FLOAT, "1.0", 0, 1.0e30, NULL, 0, "max global gradient norm (0: off)") \
  X(training, recompute, STR, "none", 0, 0, "none|blocks|attention", 0,                       \
    "activation recomputation: blocks keeps each block's input only and recomputes the "    \
    "block in backward; attention keeps everything but the attention probabilities (B, "    \
    "heads, T, T) and recomputes those (same numbers, less memory)")                         \
  X(optimizer, name, STR, "adamw", 0, 0, "adamw", 0, "optimizer")                             \
  X(optimizer, lr, FLOAT, "3.0e-4", 0, 100, NULL, 0, "peak learning rate")                     \
  X(optimizer, betas, FLOATS, "[0.9, 0.95]", 0, 0.999999999, NULL, TD_F_LEN2, "AdamW betas [b1, b2]") \
  X(optimizer, eps, FLOAT, "1.0e-8", 1.0e-30, 1, NULL, 0, "AdamW epsilon")                    \
  X(optimizer, weight_decay, FLOAT, "0.0", 0, 100, NULL, 0, "decoupled weight decay (2-D weights only)") \
  X(optimizer, offload, STR, "none", 0, 0, "none|cpu", 0,                                    \
    "cpu: fp32 master weights and AdamW moments in host memory, AdamW on the CPU "          \
    "(run.device: cuda only; the same numbers, 12 bytes per parameter off the device in bf16)") \
  X(schedule, warmup, INT, "0", 0, TD_BIG, NULL, 0, "linear warm-up steps")                   \
  X(schedule, decay, STR, "cosine", 0, 0, "cosine|linear|constant", 0, "decay after warm-up") \
  X(schedule, min_lr, FLOAT, "0.0", 0, 100, NULL, 0, "learning rate at the last step")          \
  X(checkpoint, dir, STR, "", 0, 0, NULL, 0, "checkpoint folder (default <out_dir>/ckpt)")    \
  X(checkpoint, every, INT, "0", 0, TD_BIG, NULL, 0, "save every N steps (0: only at the end)") \
  X(checkpoint, keep, INT, "3", 0, TD_BIG, NULL, 0, "committed checkpoints kept (0: all)")     \
  X(checkpoint, resume, STR, "auto", 0, 0, NULL, 0, "auto (latest if present), never (start afresh), or a PATH to a checkpoint file or folder") \
  X(checkpoint, verify, BOOL, "true", 0, 0, NULL, 0, "verify checksums on load")              \
  X(checkpoint, async, BOOL, "false", 0, 0, NULL, TD_F_HOW,                                   \
    "save in the background: the state is copied to host memory and training goes on "     \
    "while a thread writes the file (the same file; at most one save in flight)")           \
  X(checkpoint, overwrite, BOOL, "false", 0, 0, NULL, 0,                                       \
    "with resume: never, delete an earlier run's checkpoints in checkpoint.dir and start afresh " \
    "(false: such a folder is refused)")                                                     \
  X(logging, every, INT, "1", 1, TD_BIG, NULL, 0, "log every N steps")                        \
  X(logging, straggler_pct, FLOAT, "20", 0, 1.0e6, NULL, 0,                                  \
    "at every metrics line, name the ranks whose busy time a step (compute and data loading) " \
    "exceeds the median rank's by more than this many percent (0: never)")                  \
  X(logging, metrics, STR, "", 0, 0, NULL, 0, "JSON Lines metrics file (default <out_dir>/metrics.jsonl)") \
  X(logging, tensorboard, STR, "", 0, 0, NULL, 0,                                           \
    "TensorBoard event folder, written by rank 0 (true: <out_dir>/tb; empty or false: off)") \
  X(eval, every, INT, "0", 0, TD_BIG, NULL, 0, "evaluate every N steps (0: only at the end)")  \
  X(eval, batches, INT, "8", 1, TD_BIG, NULL, 0, "evaluation windows = batches × global_batch") \
  X(eval, choice, STR, "", 0, 0, NULL, 0,                                                     \
    "a multiple-choice file (HellaSwag's JSONL: ctx, endings, label) scored at every "        \
    "evaluation: choice_acc and choice_acc_norm in the metrics and TensorBoard")

#define TD_DECK_SECTIONS(X) \
  X(run) X(model) X(parallel) X(data) X(training) X(optimizer) X(schedule) \
  X(checkpoint) X(logging) X(eval)

#define TD_CFIELD_INT(n) int64_t n
#define TD_CFIELD_FLOAT(n) double n
#define TD_CFIELD_STR(n) char n[TD_STR_MAX]
#define TD_CFIELD_BOOL(n) int n
#define TD_CFIELD_INTS(n) int64_t n[TD_LIST_MAX]; int n##_count
#define TD_CFIELD_FLOATS(n) double n[TD_LIST_MAX]; int n##_count

/* The resolved deck. Plain data: copied and broadcast as bytes. */
typedef struct td_config {
#define TD_X_FIELD(sec, key, type, def, lo, hi, ch, fl, doc) TD_CFIELD_##type(sec##_##key);
  TD_DECK_SCHEMA(TD_X_FIELD)
#undef TD_X_FIELD
  char deck_path[TD_STR_MAX]; /* the file it came from */
  int world;                  /* ranks the config was checked against */
} td_config;

/* Read the deck at `path`, apply `nset` overrides "key.path=value", fill in
 * defaults and derived paths, and check every value and cross-constraint
 * against `world` ranks. Errors → TD_ERR_DECK naming path:line:col (or the
 * --set argument). Not collective. */
td_status td_config_load(const char *path, int nset, char **sets, int world,
                         td_config *cfg);
/* The same from YAML text (a checkpoint's /config), named `name` in errors,
 * without the world-size check. */
td_status td_config_load_text(const char *name, const char *text, td_config *cfg);
/* The same from YAML text with overrides, checked against `world` ranks (0:
 * any): trident plan checks each configuration it considers this way. */
td_status td_config_load_text_sets(const char *name, const char *text, int nset, char **sets,
                                   int world, td_config *cfg);
/* Write the resolved deck as YAML (loadable by td_config_load). */
void td_config_print(const td_config *cfg, FILE *out);
/* The resolved deck as YAML text in a malloc'd string; for a checkpoint's
 * /config (checkpoint != 0) without the TD_F_HOW keys. */
td_status td_config_to_text(const td_config *cfg, int checkpoint, char **out);
/* The schema as a Markdown table (`trident check --schema`, docs/decks.md). */
void td_config_print_schema(FILE *out);
/* Names of model keys whose values differ, comma-separated, in buf ("" if
 * the models match); model.init_from and the kernels' choices
 * (model.attention, model.head, model.head_chunk) are not the model. */
void td_config_model_diff(const td_config *a, const td_config *b, char *buf, size_t cap);

/* The model's shapes, from the deck (global; the one place the registry, the
 * model, the size checks and the FLOP estimate take them from). */
typedef struct td_model_dims {
  int llama;          /* model.arch: llama */
  int tied;           /* the output head is the token embedding */
  int64_t V, T, L, C; /* vocabulary, context, blocks, width */
  int64_t H, KV, HS;  /* query heads, key/value heads, head size */
  int64_t F;          /* MLP hidden width (gpt2: 4C) */
  int64_t block_params;   /* parameters of one block */
  int64_t block_matmul;   /* weights of one block's matmuls (FLOPs: 6 per token each) */
  int64_t params;         /* all parameters (global, unpadded) */
  /* model.moe: E experts of width Fe, top K, in every-th block (0: dense) */
  int64_t E, K, Fe, every;
  int64_t moe_layers;     /* sparse blocks */
  int64_t moe_params;     /* one sparse block's router and experts (replacing its MLP) */
  int64_t active_params;  /* parameters a token uses: the K experts of each sparse block */
  int64_t moe_matmul;     /* weights of a sparse block's matmuls a token uses (router, K experts) */
  int64_t cap;            /* capacity_factor c > 0: slots an expert keeps of a sequence,
                             ⌈c·T·K/E⌉; 0: dropless */
  /* per block, averaged over the blocks (= block_matmul, block_params for a
   * dense model): the matmul weights a token uses, the parameters held */
  double avg_block_matmul, avg_block_params;
} td_model_dims;
/* Block `layer` is sparse (model.moe). */
int td_config_moe_layer(const td_config *cfg, int64_t layer);
void td_config_dims(const td_config *cfg, td_model_dims *d);

/* Derived quantities used everywhere. */
int64_t td_config_micro_batch(const td_config *cfg);  /* resolved micro-batch */
int64_t td_config_accum_steps(const td_config *cfg);  /* micro-batches per step per rank */
/* Layers of pipeline stage s and the first layer of it. */
/* Layers [first, first + count) of model chunk k (0 ≤ k < pp·virtual_stages):
 * parallel.stage_layers[k], or an even split. Stage s holds chunks s, s + pp,
 * s + 2·pp, ... (interleaved); without virtual stages chunk s is stage s. */
void td_config_chunk_layers(const td_config *cfg, int k, int64_t *first, int64_t *count);
/* Layers of stage s when it holds one chunk (virtual_stages 1). */
void td_config_stage_layers(const td_config *cfg, int s, int64_t *first, int64_t *count);

#endif
