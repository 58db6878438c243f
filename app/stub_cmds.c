/* stub_cmds.c — TEMPORARY: sub-commands not written yet. */
#include "app/td_app.h"
#include "parallel/td_mpi.h"
static td_status nyi(td_app *app, const char *w) {
  td_status st = td_error_set(TD_ERR_UNSUPPORTED, __FILE__, __LINE__, __func__, "%s: not implemented yet", w);
  return td_agree(app->world, st);
}
td_status td_cmd_eval(td_app *app, int argc, char **argv) { return nyi(app, "eval"); }
td_status td_cmd_generate(td_app *app, int argc, char **argv) { return nyi(app, "generate"); }
td_status td_cmd_ckpt(td_app *app, int argc, char **argv) { return nyi(app, "ckpt"); }
