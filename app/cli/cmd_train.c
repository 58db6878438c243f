/* cmd_train.c — `trident train DECK [--set k=v]... [--dump FILE]`. */
#include <string.h>

#include "app/cli/td_cli.h"
#include "app/train/td_checkpoint.h"
#include "app/train/td_runlock.h"
#include "app/train/td_trainer.h"
#include "parallel/td_mpi.h"

td_status td_cmd_train(td_app *app, int argc, char **argv) {
  td_deck_args a;
  td_status st = td_app_deck_args("train", argc, argv, &a);
  const char *dump = NULL;
  for (int i = 0; st == TD_OK && i < a.nrest; ++i) {
    if (strcmp(a.rest[i], "--dump") == 0 && i + 1 < a.nrest)
      dump = a.rest[++i];
    else
      st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                        "trident train: unknown option '%s' (see trident train --help)", a.rest[i]);
  }
  if (st == TD_OK && !a.deck)
    st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                      "trident train: missing DECK (usage: trident train DECK [--set k.k=v]...)");
  TD_CHECK(td_agree(app->world, st));
  td_config cfg;
  TD_CHECK(td_app_load_config(app, &a, &cfg));
  TD_CHECK(td_app_check_paths(app, &cfg, 1, 1, 1));
  td_runlock *lock = NULL; /* one run per checkpoint folder (td_runlock.h) */
  TD_CHECK(td_runlock_claim(app, &cfg, &lock));
  td_trainer *t = NULL;
  st = td_trainer_create(app, &cfg, 1, 1, &t);
  if (st == TD_OK) {
    t->dump_path = dump;
    st = td_trainer_resume(t);
  }
  if (st == TD_OK) st = td_trainer_run(t);
  td_trainer_destroy(&t);
  td_runlock_release(&lock);
  return st;
}
