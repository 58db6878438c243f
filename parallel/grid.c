/* grid.c — communicators of the 3-D process grid. */
#include "parallel/td_grid.h"

#include <stdlib.h>

#include "parallel/td_mpi.h"
#include "parallel/td_watchdog.h"

int td_grid_rank_of(const td_grid *g, int dp_rank, int tp_rank, int pp_rank) {
  return tp_rank + g->tp * (dp_rank + g->dp * pp_rank);
}

static td_status split(MPI_Comm world, int color, int key, MPI_Comm *out) {
  TD_MPI_CHECK(MPI_Comm_split(world, color, key, out));
  if (*out != MPI_COMM_NULL) TD_MPI_CHECK(MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN));
  return TD_OK;
}

td_status td_grid_create(MPI_Comm world, int dp, int tp, int pp, td_grid **out) {
  td_status st = TD_OK;
  *out = NULL;
  td_grid *g = calloc(1, sizeof *g);
  if (!g) TD_FAIL(TD_ERR_NOMEM, "out of memory");
  g->tp_comm = g->dp_comm = g->pp_comm = g->embed_comm = MPI_COMM_NULL;
  g->world = world;
  g->dp = dp, g->tp = tp, g->pp = pp;
  int rc = MPI_Comm_rank(world, &g->rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(world, &g->size);
  if (rc != MPI_SUCCESS) {
    st = td_mpi_fail(rc, "MPI_Comm_rank/size", __FILE__, __LINE__, __func__);
    goto done;
  }
  if (g->size != dp * tp * pp)
    TD_FAIL_GOTO(TD_ERR_INTERNAL, "grid %d×%d×%d does not match %d ranks", dp, tp, pp, g->size);
  g->tp_rank = g->rank % tp;
  g->dp_rank = (g->rank / tp) % dp;
  g->pp_rank = g->rank / (tp * dp);
  /* Colors identify the group, keys order its members by their coordinate. */
  TD_CHECK_GOTO(split(world, g->dp_rank + dp * g->pp_rank, g->tp_rank, &g->tp_comm));
  TD_CHECK_GOTO(split(world, g->tp_rank + tp * g->pp_rank, g->dp_rank, &g->dp_comm));
  TD_CHECK_GOTO(split(world, g->tp_rank + tp * g->dp_rank, g->pp_rank, &g->pp_comm));
  int ends = g->pp_rank == 0 || g->pp_rank == pp - 1;
  TD_CHECK_GOTO(split(world, ends ? g->tp_rank + tp * g->dp_rank : MPI_UNDEFINED, g->pp_rank,
                      &g->embed_comm));
  td_watchdog_name(world, "the world communicator");
  td_watchdog_name(g->tp_comm, "tp_comm (tensor-parallel group)");
  td_watchdog_name(g->dp_comm, "dp_comm (data-parallel replicas)");
  td_watchdog_name(g->pp_comm, "pp_comm (pipeline stages)");
  if (g->embed_comm != MPI_COMM_NULL)
    td_watchdog_name(g->embed_comm, "embed_comm (first and last pipeline stage)");
done:
  if (st != TD_OK) {
    td_grid_destroy(&g);
    return st;
  }
  *out = g;
  return TD_OK;
}

void td_grid_destroy(td_grid **gp) {
  if (!gp || !*gp) return;
  td_grid *g = *gp;
  *gp = NULL;
  MPI_Comm *cs[] = {&g->tp_comm, &g->dp_comm, &g->pp_comm, &g->embed_comm};
  for (int i = 0; i < 4 && !td_error_alone(); ++i) /* collective: not when failing alone */
    if (*cs[i] != MPI_COMM_NULL) MPI_Comm_free(cs[i]);
  free(g);
}
