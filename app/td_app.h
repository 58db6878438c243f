/* td_app.h — the sub-commands of the trident executable and what they share. */
#ifndef TD_APP_H
#define TD_APP_H

#include <mpi.h>

#include "app/td_config.h"
#include "td_error.h"

/* What main hands every sub-command. */
typedef struct td_app {
  MPI_Comm world; /* duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN */
  int rank, size;
} td_app;

/* One sub-command: argv[0] is its name. Returns a status; errors that every
 * rank saw are agreed (td_agree) before returning. Collective on app->world. */
typedef td_status (*td_cmd_fn)(td_app *app, int argc, char **argv);

td_status td_cmd_check(td_app *app, int argc, char **argv);
td_status td_cmd_train(td_app *app, int argc, char **argv);
td_status td_cmd_eval(td_app *app, int argc, char **argv);
td_status td_cmd_generate(td_app *app, int argc, char **argv);
td_status td_cmd_prepare(td_app *app, int argc, char **argv);
td_status td_cmd_ckpt(td_app *app, int argc, char **argv);
td_status td_cmd_export(td_app *app, int argc, char **argv);
td_status td_cmd_plan(td_app *app, int argc, char **argv);

/* Parsed "DECK [--set k=v]... [other options]" command lines. */
#define TD_MAX_SETS 128
typedef struct td_deck_args {
  const char *deck;
  int nset;
  char *sets[TD_MAX_SETS];
  int nrest;           /* options the command handles itself, in order */
  char *rest[64];
} td_deck_args;

/* Split argv (after the sub-command name) into the deck, --set overrides
 * (--set k=v or --set=k=v) and the remaining options. Usage errors →
 * TD_ERR_USAGE naming `cmd`. */
td_status td_app_deck_args(const char *cmd, int argc, char **argv, td_deck_args *out);
/* Read and check the deck on rank 0, agree on errors, broadcast the config.
 * Collective on app->world. */
td_status td_app_load_config(td_app *app, const td_deck_args *a, td_config *cfg);

#endif
