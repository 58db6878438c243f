/* cmd_eval.c — `trident eval DECK [--checkpoint FILE] [--json] [--set ...]`:
 * the validation loss of a checkpoint (default: checkpoint.dir/latest) by the
 * protocol of docs/architecture.md, on the deck's grid. */
#include <stdio.h>
#include <string.h>

#include "app/cli/td_cli.h"
#include "app/train/td_checkpoint.h"
#include "app/train/td_trainer.h"
#include "io/td_ckpt.h"
#include "parallel/td_mpi.h"

td_status td_cmd_eval(td_app *app, int argc, char **argv) {
  td_deck_args a;
  td_status st = td_app_deck_args("eval", argc, argv, &a);
  const char *ckpt = NULL;
  int json = 0;
  for (int i = 0; st == TD_OK && i < a.nrest; ++i) {
    if (strcmp(a.rest[i], "--checkpoint") == 0 && i + 1 < a.nrest)
      ckpt = a.rest[++i];
    else if (strcmp(a.rest[i], "--json") == 0)
      json = 1;
    else
      st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                        "trident eval: unknown option '%s' (see trident eval --help)", a.rest[i]);
  }
  if (st == TD_OK && !a.deck)
    st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                      "trident eval: missing DECK (usage: trident eval DECK [--checkpoint FILE])");
  TD_CHECK(td_agree(app->world, st));
  td_config cfg;
  TD_CHECK(td_app_load_config(app, &a, &cfg));
  TD_CHECK(td_app_check_paths(app, &cfg, 0, 1, 0));
  char path[TD_STR_MAX + 64] = "";
  int found = 0;
  if (ckpt) /* a file, a checkpoint folder or a run folder */
    TD_CHECK(td_cli_checkpoint(app, "trident eval: --checkpoint", ckpt, path, sizeof path));
  if (app->rank == 0 && !ckpt) {
    st = td_ckpt_resolve(cfg.checkpoint_dir, "auto", &found, path, sizeof path);
    if (st == TD_OK && !found)
      st = td_error_set(TD_ERR_CKPT, __FILE__, __LINE__, __func__,
                        "trident eval: no checkpoint in %s (train first, or give --checkpoint FILE)",
                        cfg.checkpoint_dir);
  }
  TD_CHECK(td_agree(app->world, st));
  TD_MPI_CHECK(MPI_Bcast(path, (int)sizeof path, MPI_CHAR, 0, app->world));
  td_trainer *t = NULL;
  TD_CHECK(td_trainer_create(app, &cfg, 0, 1, &t));
  double loss = 0.0;
  int64_t n = 0;
  st = td_trainer_load(t, path, 0);
  if (st == TD_OK) st = td_trainer_eval(t, &loss, &n);
  if (st == TD_OK && app->rank == 0) {
    if (json)
      printf("{\"step\": %lld, \"val_loss\": %.9g, \"val_tokens\": %lld, \"checkpoint\": \"%s\"}\n",
             (long long)t->step, loss, (long long)n, path);
    else
      printf("eval: %s (step %lld): val_loss %.6f over %lld tokens of %s\n", path,
             (long long)t->step, loss, (long long)n, cfg.data_val);
  }
  td_trainer_destroy(&t);
  return st;
}
