/* deck_args.c — the deck of a sub-command: "DECK [--set k=v]..." split from
 * argv, and the deck read on rank 0, checked and broadcast to every rank. */
#include "app/deck/td_app.h"

#include <string.h>

#include "parallel/td_mpi.h"

td_status td_app_deck_args(const char *cmd, int argc, char **argv, td_deck_args *out) {
  memset(out, 0, sizeof *out);
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    if (strcmp(a, "--set") == 0 || strncmp(a, "--set=", 6) == 0) {
      const char *v = a[5] == '=' ? a + 6 : (i + 1 < argc ? argv[++i] : NULL);
      if (!v) TD_FAIL(TD_ERR_USAGE, "trident %s: --set needs key.path=value", cmd);
      if (out->nset == TD_MAX_SETS) TD_FAIL(TD_ERR_USAGE, "trident %s: too many --set", cmd);
      out->sets[out->nset++] = (char *)v;
    } else if (a[0] == '-' && a[1] != '\0') {
      if (out->nrest == 64) TD_FAIL(TD_ERR_USAGE, "trident %s: too many options", cmd);
      out->rest[out->nrest++] = argv[i];
      /* an option's value travels with it when it does not look like an option */
      if (!strchr(a, '=') && i + 1 < argc && argv[i + 1][0] != '-' && out->nrest < 64 &&
          strcmp(a, "--json") != 0 && strcmp(a, "--schema") != 0)
        out->rest[out->nrest++] = argv[++i];
    } else if (!out->deck) {
      out->deck = a;
    } else {
      TD_FAIL(TD_ERR_USAGE, "trident %s: unexpected argument '%s' (one deck per run)", cmd, a);
    }
  }
  return TD_OK;
}

td_status td_app_load_config(td_app *app, const td_deck_args *a, td_config *cfg) {
  td_status st = TD_OK;
  if (app->rank == 0) st = td_config_load(a->deck, a->nset, (char **)a->sets, app->size, cfg);
  TD_CHECK(td_agree(app->world, st));
  TD_MPI_CHECK(MPI_Bcast(cfg, (int)sizeof *cfg, MPI_BYTE, 0, app->world));
  return TD_OK;
}
