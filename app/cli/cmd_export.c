/* cmd_export.c — `trident export --checkpoint FILE --out DIR [--dtype fp32|bf16]`:
 * a checkpoint's model as Hugging Face files: DIR/model.safetensors and
 * DIR/config.json. GPT-2: names transformer.<registry name>, Conv1D (in, out)
 * layouts as trident keeps them, the tied lm_head left out as Hugging Face
 * does, a GPT2LMHeadModel config. LLaMA: the registry's names are already
 * LlamaForCausalLM's (nn.Linear (out, in)), lm_head present unless tied, a
 * LlamaForCausalLM config. The tensors are the registry's, in its order,
 * read whole from /model (any saved grid). Rank 0 works; the others wait
 * for its status. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/cli/td_cli.h"
#include "app/deck/td_config.h"
#include "app/model/td_registry.h"
#include "io/td_ckpt.h"
#include "io/td_h5.h"
#include "io/td_safetensors.h"
#include "common/td_bf16.h"
#include "parallel/td_mpi.h"

typedef struct {
  const char *ckpt, *out;
  int bf16;
} export_args;

static td_status parse(int argc, char **argv, export_args *a) {
  a->ckpt = a->out = NULL, a->bf16 = 0;
  for (int i = 1; i < argc; ++i) {
    const char *o = argv[i];
    int has = i + 1 < argc;
    if (!strcmp(o, "--checkpoint") && has) {
      a->ckpt = argv[++i];
    } else if (!strcmp(o, "--out") && has) {
      a->out = argv[++i];
    } else if (!strcmp(o, "--dtype") && has) {
      const char *d = argv[++i];
      if (strcmp(d, "fp32") && strcmp(d, "bf16"))
        TD_FAIL(TD_ERR_USAGE, "trident export: --dtype must be fp32 or bf16, got '%s'", d);
      a->bf16 = !strcmp(d, "bf16");
    } else {
      TD_FAIL(TD_ERR_USAGE, "trident export: unknown option '%s' (usage: trident export "
              "--checkpoint FILE --out DIR [--dtype fp32|bf16])", o);
    }
  }
  if (!a->ckpt || !a->out)
    TD_FAIL(TD_ERR_USAGE, "trident export: --checkpoint PATH and --out DIR are required");
  static char out[4096]; /* --out hf/ names hf/model.safetensors, not hf//... */
  snprintf(out, sizeof out, "%s", a->out);
  for (size_t n = strlen(out); n > 1 && out[n - 1] == '/'; --n) out[n - 1] = '\0';
  a->out = out;
  return TD_OK;
}

/* config.json for transformers' LlamaForCausalLM, or MixtralForCausalLM
 * when every block is sparse (model.moe.every 1: Mixtral's intermediate_size
 * is an expert's width). */
static void write_llama_config(FILE *f, const td_config *c, int bf16) {
  td_model_dims d;
  td_config_dims(c, &d);
  if (d.E > 0) {
    fprintf(f,
            "{\n  \"architectures\": [\"MixtralForCausalLM\"],\n  \"model_type\": \"mixtral\",\n"
            "  \"num_local_experts\": %lld,\n  \"num_experts_per_tok\": %lld,\n"
            "  \"router_aux_loss_coef\": %.17g,\n  \"output_router_logits\": false,\n"
            "  \"sliding_window\": null,\n",
            (long long)d.E, (long long)d.K, c->model_moe_aux_loss);
    d.F = d.Fe;
  } else {
    fprintf(f, "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n");
  }
  fprintf(f,
          "  \"vocab_size\": %lld,\n  \"hidden_size\": %lld,\n  \"intermediate_size\": %lld,\n"
          "  \"num_hidden_layers\": %lld,\n  \"num_attention_heads\": %lld,\n"
          "  \"num_key_value_heads\": %lld,\n  \"head_dim\": %lld,\n"
          "  \"max_position_embeddings\": %lld,\n  \"rms_norm_eps\": %.17g,\n"
          "  \"rope_theta\": %.17g,\n  \"hidden_act\": \"silu\",\n  \"attention_bias\": false,\n"
          "  \"mlp_bias\": false,\n  \"initializer_range\": 0.02,\n"
          "  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"%s\"\n}\n",
          (long long)d.V, (long long)d.C, (long long)d.F, (long long)d.L, (long long)d.H,
          (long long)d.KV, (long long)d.HS, (long long)d.T, c->model_norm_eps,
          c->model_rope_theta, d.tied ? "true" : "false", bf16 ? "bfloat16" : "float32");
}

/* config.json for transformers' GPT2LMHeadModel, LlamaForCausalLM or
 * MixtralForCausalLM. */
static td_status write_config(const char *dir, const td_config *c, int bf16) {
  char path[4096];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "w");
  if (!f) TD_FAIL(TD_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
  if (strcmp(c->model_arch, "llama") == 0) {
    write_llama_config(f, c, bf16);
    if (fclose(f) != 0) TD_FAIL(TD_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return TD_OK;
  }
  fprintf(f,
          "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
          "  \"vocab_size\": %lld,\n  \"n_positions\": %lld,\n  \"n_ctx\": %lld,\n"
          "  \"n_embd\": %lld,\n  \"n_layer\": %lld,\n  \"n_head\": %lld,\n"
          "  \"n_inner\": null,\n  \"activation_function\": \"gelu_new\",\n"
          "  \"layer_norm_epsilon\": 1e-05,\n  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n"
          "  \"attn_pdrop\": 0.0,\n  \"initializer_range\": 0.02,\n"
          "  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"%s\"",
          (long long)c->model_vocab_size, (long long)c->model_seq_len,
          (long long)c->model_seq_len, (long long)c->model_dim, (long long)c->model_layers,
          (long long)c->model_heads, bf16 ? "bfloat16" : "float32");
  if (c->model_vocab_size > 50256) /* GPT-2's <|endoftext|> */
    fprintf(f, ",\n  \"bos_token_id\": 50256,\n  \"eos_token_id\": 50256");
  fprintf(f, "\n}\n");
  if (fclose(f) != 0) TD_FAIL(TD_ERR_IO, "%s: write failed: %s", path, strerror(errno));
  return TD_OK;
}

/* The tensor's stored checksum (td_ckpt.h) against its values: a damaged
 * checkpoint is refused as train, eval and generate refuse it. */
static td_status verify(hid_t f, const char *file, const char *path, const float *x, int64_t n) {
  td_status st = TD_OK;
  uint64_t stored = 0;
  hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
  if (d < 0) {
    H5Eclear2(H5E_DEFAULT);
    TD_FAIL(TD_ERR_CKPT, "%s: tensor %s is missing", file, path);
  }
  htri_t has = H5Aexists(d, "checksum");
  H5Eclear2(H5E_DEFAULT);
  if (has <= 0) {
    H5Dclose(d);
    TD_FAIL(TD_ERR_CKPT, "%s: tensor %s has no checksum attribute (see trident ckpt info %s)",
            file, path, file);
  }
  st = td_h5_attr_read_u64(d, file, "checksum", &stored);
  H5Dclose(d);
  TD_CHECK(st);
  uint64_t computed = td_ckpt_checksum(x, n, 0);
  if (computed != stored)
    TD_FAIL(TD_ERR_CKPT, "%s: tensor %s: CHECKSUM MISMATCH (stored 0x%016llx, computed 0x%016llx); "
            "nothing exported (trident ckpt info %s lists every tensor)", file, path,
            (unsigned long long)stored, (unsigned long long)computed, file);
  return TD_OK;
}

static td_status export_main(const export_args *a) {
  td_status st = TD_OK;
  hid_t f = -1;
  char *yaml = NULL;
  td_registry *reg = NULL;
  td_st_tensor *t = NULL;
  char (*names)[80] = NULL;
  void **data = NULL;
  td_config cfg;
  td_h5_init();
  if (access(a->ckpt, R_OK) != 0)
    TD_FAIL_GOTO(TD_ERR_CKPT, "%s: cannot read the checkpoint: %s", a->ckpt, strerror(errno));
  htri_t is = H5Fis_hdf5(a->ckpt);
  H5Eclear2(H5E_DEFAULT);
  if (is <= 0) TD_FAIL_GOTO(TD_ERR_CKPT, "%s: not a trident checkpoint (not HDF5)", a->ckpt);
  TD_CHECK_GOTO(td_h5_open(a->ckpt, MPI_COMM_NULL, 0, &f));
  TD_CHECK_GOTO(td_h5_read_string(f, a->ckpt, "/config", &yaml));
  char where[4200];
  snprintf(where, sizeof where, "%s:/config", a->ckpt);
  TD_CHECK_GOTO(td_config_load_text(where, yaml, &cfg));
  const char *prefix = strcmp(cfg.model_arch, "gpt2") == 0 ? "transformer." : "";
  if (cfg.model_moe_experts > 0 && strcmp(cfg.model_arch, "llama") != 0)
    TD_FAIL_GOTO(TD_ERR_USAGE, "%s: model.moe with model.arch gpt2: transformers has no class "
                 "for GPT-2 with sparse blocks (Mixtral is the LLaMA family's); nothing exported",
                 a->ckpt);
  if (cfg.model_moe_experts > 0 && cfg.model_moe_every != 1)
    TD_FAIL_GOTO(TD_ERR_USAGE, "%s: model.moe.every = %lld: transformers' Mixtral makes every "
                 "block sparse, and has no class for a model with dense blocks between; nothing "
                 "exported", a->ckpt, (long long)cfg.model_moe_every);
  TD_CHECK_GOTO(td_registry_create(&cfg, 1, 0, 1, 0, &reg));
  t = calloc((size_t)reg->n, sizeof *t);
  names = calloc((size_t)reg->n, sizeof *names);
  data = calloc((size_t)reg->n, sizeof *data);
  if (!t || !names || !data) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory");
  for (int i = 0; i < reg->n; ++i) {
    const td_param *p = &reg->p[i];
    int64_t n = p->ndim == 2 ? p->shape[0] * p->shape[1] : p->shape[0];
    char h5path[96];
    snprintf(h5path, sizeof h5path, "/model/%s", p->name);
    snprintf(names[i], sizeof names[i], "%s%s", prefix, p->name);
    TD_CHECK_GOTO(td_alloc(&data[i], (size_t)n * sizeof(float), "exported tensor"));
    TD_CHECK_GOTO(td_h5_read(f, a->ckpt, h5path, H5T_NATIVE_FLOAT, p->ndim, p->shape, data[i]));
    TD_CHECK_GOTO(verify(f, a->ckpt, h5path, data[i], n));
    if (a->bf16) { /* in place: the bf16 values fill the first half */
      float *x = data[i];
      td_bf16 *h = data[i];
      for (int64_t j = 0; j < n; ++j) h[j] = td_bf16_from_f32(x[j]);
    }
    t[i] = (td_st_tensor){names[i], a->bf16 ? "BF16" : "F32", p->ndim,
                          {p->shape[0], p->shape[1], 0, 0}, data[i],
                          n * (a->bf16 ? 2 : 4)};
  }
  if (mkdir(a->out, 0777) != 0 && errno != EEXIST)
    TD_FAIL_GOTO(TD_ERR_IO, "%s: cannot create the folder: %s", a->out, strerror(errno));
  char path[4096];
  snprintf(path, sizeof path, "%s/model.safetensors", a->out);
  const char *meta[] = {"format", "pt", "source", "trident export"};
  TD_CHECK_GOTO(td_safetensors_write(path, t, reg->n, meta, 2));
  TD_CHECK_GOTO(write_config(a->out, &cfg, a->bf16));
  printf("export: %s -> %s (%d tensors, %s) and %s/config.json\n", a->ckpt, path, reg->n,
         a->bf16 ? "bf16" : "fp32", a->out);
done:
  for (int i = 0; data && reg && i < reg->n; ++i) td_free(data[i]);
  free(data);
  free(names);
  free(t);
  td_registry_destroy(&reg);
  td_free(yaml);
  td_h5_close(&f);
  return st;
}

td_status td_cmd_export(td_app *app, int argc, char **argv) {
  export_args a;
  td_status st = parse(argc, argv, &a);
  TD_CHECK(td_agree(app->world, st));
  char ckpt_path[4300];
  TD_CHECK(td_cli_checkpoint(app, "trident export: --checkpoint", a.ckpt, ckpt_path,
                             sizeof ckpt_path));
  a.ckpt = ckpt_path;
  if (app->rank == 0) st = export_main(&a);
  TD_CHECK(td_agree(app->world, st));
  return TD_OK;
}
