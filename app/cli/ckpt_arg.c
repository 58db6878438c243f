/* ckpt_arg.c — the checkpoint a command line names (see td_cli.h). */
#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/cli/td_cli.h"
#include "io/td_ckpt.h"
#include "io/td_h5.h"
#include "parallel/td_mpi.h"

/* A file that is readable HDF5 with format = "trident-checkpoint". */
static td_status check_file(const char *what, const char *path) {
  if (access(path, R_OK) != 0)
    TD_FAIL(TD_ERR_USAGE, "%s %s: %s", what, path, strerror(errno));
  htri_t is = H5Fis_hdf5(path);
  H5Eclear2(H5E_DEFAULT);
  if (is <= 0)
    TD_FAIL(TD_ERR_USAGE, "%s %s: not an HDF5 file (a checkpoint is step_XXXXXXXX.h5 in a run's "
            "ckpt/ folder)", what, path);
  if (td_ckpt_check_file(path) != TD_OK) { /* format, version, step, ...: one line */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", td_error_message());
    td_error_clear();
    TD_FAIL(TD_ERR_USAGE, "%s %s", what, msg);
  }
  return TD_OK;
}

static td_status resolve0(const char *what, const char *arg, char *path, size_t cap) {
  struct stat sb;
  if (stat(arg, &sb) != 0) TD_FAIL(TD_ERR_USAGE, "%s %s: %s", what, arg, strerror(errno));
  if (!S_ISDIR(sb.st_mode)) {
    snprintf(path, cap, "%s", arg);
    return check_file(what, path);
  }
  /* a folder: its `latest`, or its ckpt/ folder's (a run folder) */
  char dir[4096], latest[4200];
  snprintf(dir, sizeof dir, "%s", arg);
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') dir[--n] = '\0';
  snprintf(latest, sizeof latest, "%s/latest", dir);
  if (access(latest, F_OK) != 0) {
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/ckpt/latest", dir);
    if (access(sub, F_OK) != 0)
      TD_FAIL(TD_ERR_USAGE, "%s %s: a folder without checkpoints (neither %s nor %s exists): "
              "give a checkpoint file, a checkpoint folder or a run folder", what, arg, latest,
              sub);
    snprintf(dir + n, sizeof dir - n, "/ckpt");
  }
  int found = 0;
  TD_CHECK(td_ckpt_resolve(dir, "auto", &found, path, cap));
  if (!found) TD_FAIL(TD_ERR_USAGE, "%s %s: no checkpoint in %s", what, arg, dir);
  return check_file(what, path);
}

td_status td_cli_checkpoint(td_app *app, const char *what, const char *arg, char *path, size_t cap) {
  td_status st = TD_OK;
  if (app->rank == 0) {
    td_h5_init();
    st = resolve0(what, arg, path, cap);
  }
  TD_CHECK(td_agree(app->world, st));
  TD_MPI_CHECK(MPI_Bcast(path, (int)cap, MPI_CHAR, 0, app->world));
  return TD_OK;
}
