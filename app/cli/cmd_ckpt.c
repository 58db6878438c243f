/* cmd_ckpt.c — `trident ckpt info FILE`: step, tokens seen, saved grid, model
 * config and every tensor with its shape and checksum status (rank 0). */
#include <string.h>

#include "app/cli/td_cli.h"
#include "io/td_ckpt.h"
#include "io/td_h5.h"
#include "parallel/td_mpi.h"

td_status td_cmd_ckpt(td_app *app, int argc, char **argv) {
  td_status st = TD_OK;
  if (argc != 3 || strcmp(argv[1], "info") != 0)
    st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                      "usage: trident ckpt info FILE");
  if (st == TD_OK && app->rank == 0) {
    td_h5_init();
    st = td_ckpt_info(argv[2], stdout);
  }
  TD_CHECK(td_agree(app->world, st));
  return TD_OK;
}
