/* grid.c — communicators of the 3-D process grid. */
#include "parallel/td_grid.h"

#include <stdlib.h>

#include "parallel/td_mpi.h"
#include "parallel/td_watchdog.h"

int td_grid_rank_of(const td_grid *g, int dp_rank, int tp_rank, int pp_rank) {
  return tp_rank + g->tp * (dp_rank + g->dp * pp_rank);
}

int td_grid_group_nodes(const td_grid *g, char kind, int r) {
  int dp_rank = (r / g->tp) % g->dp, tp_rank = r % g->tp, pp_rank = r / (g->tp * g->dp);
  int n = kind == 't' ? g->tp : kind == 'd' ? g->dp : g->pp, count = 0;
  for (int i = 0; i < n; ++i) {
    int a = td_grid_rank_of(g, kind == 'd' ? i : dp_rank, kind == 't' ? i : tp_rank,
                            kind == 'p' ? i : pp_rank);
    int seen = 0; /* a node counted once: was it met at an earlier member? */
    for (int j = 0; j < i && !seen; ++j)
      seen = g->node_of[td_grid_rank_of(g, kind == 'd' ? j : dp_rank, kind == 't' ? j : tp_rank,
                                        kind == 'p' ? j : pp_rank)] == g->node_of[a];
    count += !seen;
  }
  return count;
}

/* node_of, node, nodes, local_rank/size and the groups' node counts.
 * Collective on world. */
static td_status find_nodes(td_grid *g) {
  MPI_Comm node = MPI_COMM_NULL;
  int first = g->rank;
  TD_MPI_CHECK(MPI_Comm_split_type(g->world, MPI_COMM_TYPE_SHARED, g->rank, MPI_INFO_NULL, &node));
  int rc = MPI_Comm_rank(node, &g->local_rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(node, &g->local_size);
  /* the node's lowest world rank names it */
  if (rc == MPI_SUCCESS) rc = MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_free(&node);
  TD_MPI_CHECK(rc);
  g->node_of = malloc((size_t)g->size * sizeof *g->node_of);
  int ok = g->node_of != NULL; /* agreed before the allgather */
  TD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, g->world));
  if (!ok) TD_FAIL(TD_ERR_NOMEM, "out of memory (node map of %d ranks)", g->size);
  TD_MPI_CHECK(MPI_Allgather(&first, 1, MPI_INT, g->node_of, 1, MPI_INT, g->world));
  /* lowest ranks -> node numbers, in place: a node's lowest rank r has
   * node_of[r] == r and is numbered when met; every other rank points at a
   * lower one, numbered already */
  g->nodes = 0;
  for (int r = 0; r < g->size; ++r)
    g->node_of[r] = g->node_of[r] == r ? g->nodes++ : g->node_of[g->node_of[r]];
  g->node = g->node_of[g->rank];
  g->tp_nodes = td_grid_group_nodes(g, 't', g->rank);
  g->dp_nodes = td_grid_group_nodes(g, 'd', g->rank);
  g->pp_nodes = td_grid_group_nodes(g, 'p', g->rank);
  return TD_OK;
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
  TD_CHECK_GOTO(find_nodes(g));
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
  free(g->node_of);
  free(g);
}
