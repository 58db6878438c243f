/* td_app.h — the job every sub-command runs in (its world communicator) and
 * the deck it reads there: "DECK [--set k=v]..." parsed, the deck read on
 * rank 0, checked and broadcast. The sub-commands themselves are declared in
 * app/cli/td_cli.h. */
#ifndef TD_APP_H
#define TD_APP_H

#include <mpi.h>

#include "app/deck/td_config.h"
#include "td_error.h"

/* What main hands every sub-command. */
typedef struct td_app {
  MPI_Comm world; /* duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN */
  int rank, size;
} td_app;

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
/* The files the deck names, before any work: data.train (train) and data.val
 * (val) readable, checkpoint.dir's nearest existing folder writable (ckpt).
 * Each failure is TD_ERR_DECK (exit 2) naming the deck, the key, the path,
 * and how to make the data. Rank 0 looks; collective. */
td_status td_app_check_paths(td_app *app, const td_config *c, int train, int val, int ckpt);

#endif
