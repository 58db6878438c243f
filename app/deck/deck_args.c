/* deck_args.c — the deck of a sub-command: "DECK [--set k=v]..." split from
 * argv, and the deck read on rank 0, checked and broadcast to every rank. */
#include "app/deck/td_app.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
      /* `eval --task NAME FILE`: the task's file too */
      if (strcmp(a, "--task") == 0 && i + 1 < argc && argv[i + 1][0] != '-' && out->nrest < 64)
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

/* A file the deck names is there and readable; else exit 2 naming the key. */
static td_status readable(const td_config *c, const char *key, const char *path) {
  if (access(path, R_OK) == 0) return TD_OK;
  TD_FAIL(TD_ERR_DECK, "%s: %s = %s: %s; make a dataset with `trident prepare --out FILE.h5 "
          "TEXT_FILES...` and set %s to it (docs/data.md), or run `bash jobs/quickstart.sh` once "
          "for the built-in one (data/quickstart.h5)", c->deck_path, key, path, strerror(errno),
          strncmp(key, "data.val", 8) == 0 ? "data.val" : "data.train");
}

/* The nearest folder of path that exists can be written (the rest is made). */
static td_status writable_dir(const td_config *c, const char *key, const char *dir) {
  char p[TD_STR_MAX + 8];
  snprintf(p, sizeof p, "%s", dir[0] ? dir : ".");
  struct stat sb;
  for (;;) {
    if (stat(p, &sb) == 0) break;
    char *slash = strrchr(p, '/');
    if (!slash) {
      snprintf(p, sizeof p, ".");
      continue;
    }
    if (slash == p) {
      p[1] = '\0';
      continue;
    }
    *slash = '\0';
  }
  if (!S_ISDIR(sb.st_mode))
    TD_FAIL(TD_ERR_DECK, "%s: %s = %s: %s is not a folder", c->deck_path, key, dir, p);
  if (access(p, W_OK | X_OK) != 0)
    TD_FAIL(TD_ERR_DECK, "%s: %s = %s cannot be written (%s: %s); choose a writable folder "
            "(%s or run.out_dir)", c->deck_path, key, dir, p, strerror(errno), key);
  return TD_OK;
}

td_status td_app_check_paths(td_app *app, const td_config *c, int train, int val, int ckpt) {
  td_status st = TD_OK;
  if (app->rank == 0) {
    if (train) st = readable(c, "data.train", c->data_train);
    if (st == TD_OK && val && c->data_val[0])
      st = readable(c, strcmp(c->data_val, c->data_train) ? "data.val" : "data.train (its "
                    "validation tokens)", c->data_val);
    if (st == TD_OK && ckpt) st = writable_dir(c, "checkpoint.dir", c->checkpoint_dir);
  }
  return td_agree(app->world, st);
}
