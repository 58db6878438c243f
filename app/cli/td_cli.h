/* td_cli.h — the sub-commands of the trident executable (app/cli/): main.c
 * dispatches argv[1] to one of them. */
#ifndef TD_CLI_H
#define TD_CLI_H

#include "app/deck/td_app.h"
#include "td_error.h"

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

/* The checkpoint file a command line names with `what` ("trident generate:
 * --checkpoint"): a file, a checkpoint folder (its `latest`) or a run folder
 * (its ckpt/latest). A path that does not exist, cannot be read, is not
 * HDF5 or not a trident checkpoint, or a folder without `latest`, is
 * TD_ERR_USAGE (exit 2) in one line naming the argument. Rank 0 decides;
 * path (cap bytes, the same on every rank) receives the file. Collective. */
td_status td_cli_checkpoint(td_app *app, const char *what, const char *arg, char *path, size_t cap);

#endif
