/* cmd_ckpt.c — `trident ckpt info PATH [--full]`: PATH a checkpoint file, a
 * checkpoint folder or a run folder (their `latest`). Every tensor's
 * checksum is verified either way. The short form: the file and its size,
 * the step, the model, the grid it was saved on (dp × cp × tp × pp, ZeRO
 * stage) and the tensors; --full: the step, tokens seen, saved grid, the
 * whole deck and every tensor with its shape and checksum status (rank 0). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "app/cli/td_cli.h"
#include "app/deck/td_config.h"
#include "app/model/td_registry.h"
#include "io/td_ckpt.h"
#include "io/td_h5.h"
#include "parallel/td_mpi.h"

/* The short form, from the verified file. */
static td_status info_short(const char *path, const char *summary) {
  td_status st = TD_OK;
  hid_t f = -1;
  char *yaml = NULL, where[4400], version[128] = "?";
  int64_t step = 0, tokens = 0;
  td_registry *reg = NULL;
  td_config cfg;
  TD_CHECK_GOTO(td_h5_open(path, MPI_COMM_NULL, 0, &f));
  TD_CHECK_GOTO(td_h5_attr_read_i64(f, path, "step", &step));
  TD_CHECK_GOTO(td_h5_attr_read_i64(f, path, "tokens_seen", &tokens));
  if (td_h5_attr_read_str(f, path, "trident_version", version, sizeof version) != TD_OK)
    td_error_clear();
  TD_CHECK_GOTO(td_h5_read_string(f, path, "/config", &yaml));
  snprintf(where, sizeof where, "%s:/config", path);
  struct stat sb;
  double mb = stat(path, &sb) == 0 ? (double)sb.st_size / 1e6 : 0.0;
  printf("checkpoint  %s (%.1f MB)\n", path, mb);
  printf("step        %lld (%lld tokens seen), written by trident %s\n", (long long)step,
         (long long)tokens, version);
  if (td_config_load_text(where, yaml, &cfg) != TD_OK ||
      td_registry_create(&cfg, 1, 0, 1, 0, &reg) != TD_OK) {
    /* the tensors verified; the deck is another program's or version's */
    printf("model       its /config does not load as a deck of this trident: %s\n",
           td_error_message());
    td_error_clear();
    printf("verified    %s\n", summary);
    goto done;
  }
  td_model_dims d;
  td_config_dims(&cfg, &d);
  if (strcmp(cfg.model_arch, "llama") == 0)
    printf("model       llama: %lld layers, dim %lld, %lld heads (%lld key/value), ffn %lld, "
           "vocab %lld, seq_len %lld; %.2f M parameters\n", (long long)d.L, (long long)d.C,
           (long long)d.H, (long long)d.KV, (long long)d.F, (long long)d.V, (long long)d.T,
           (double)reg->total_global / 1e6);
  else
    printf("model       gpt2: %lld layers, dim %lld, %lld heads, vocab %lld, seq_len %lld; "
           "%.2f M parameters\n", (long long)d.L, (long long)d.C, (long long)d.H,
           (long long)d.V, (long long)d.T, (double)reg->total_global / 1e6);
  printf("saved on    dp %lld x cp %lld x tp %lld x pp %lld, ZeRO %lld, %s (resumes on any "
         "grid)\n", (long long)cfg.parallel_dp, (long long)cfg.parallel_cp,
         (long long)cfg.parallel_tp, (long long)cfg.parallel_pp, (long long)cfg.parallel_zero,
         cfg.training_precision);
  printf("verified    %s\n", summary);
  printf("(trident ckpt info --full %s lists the deck and every tensor)\n", path);
done:
  td_registry_destroy(&reg);
  td_free(yaml);
  td_h5_close(&f);
  return st;
}

td_status td_cmd_ckpt(td_app *app, int argc, char **argv) {
  td_status st = TD_OK;
  const char *arg = NULL;
  int full = 0;
  for (int i = 2; i < argc; ++i) {
    if (!strcmp(argv[i], "--full")) full = 1;
    else if (!arg && argv[i][0] != '-') arg = argv[i];
    else {
      st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                        "trident ckpt info: unexpected '%s' (usage: trident ckpt info PATH [--full])",
                        argv[i]);
      break;
    }
  }
  if (st == TD_OK && (argc < 2 || strcmp(argv[1], "info") != 0 || !arg))
    st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                      "usage: trident ckpt info PATH [--full] (PATH: a checkpoint file, its "
                      "folder or a run folder)");
  TD_CHECK(td_agree(app->world, st));
  char path[4300];
  TD_CHECK(td_cli_checkpoint(app, "trident ckpt info:", arg, path, sizeof path));
  if (app->rank == 0) {
    td_h5_init();
    if (full) {
      st = td_ckpt_info(path, stdout);
    } else { /* verify everything, print the summary line only */
      char *buf = NULL;
      size_t len = 0;
      FILE *mem = open_memstream(&buf, &len);
      if (!mem) st = td_error_set(TD_ERR_NOMEM, __FILE__, __LINE__, __func__, "out of memory");
      if (st == TD_OK) st = td_ckpt_info(path, mem);
      if (mem) fclose(mem);
      if (st == TD_OK) {
        char *last = buf && len ? buf + len - 1 : NULL;
        if (last && *last == '\n') *last-- = '\0';
        while (last && last > buf && last[-1] != '\n') --last;
        st = info_short(path, last ? last : "?");
      }
      free(buf);
    }
  }
  TD_CHECK(td_agree(app->world, st));
  return TD_OK;
}
