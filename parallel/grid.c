/* grid.c — communicators of the process grid (dp × cp × tp × pp). */
#include "parallel/td_grid.h"

#include <stdlib.h>
#include <string.h>

#include "parallel/td_mpi.h"
#include "parallel/td_watchdog.h"

int td_grid_rank_of(const td_grid *g, int dp_rank, int cp_rank, int tp_rank, int pp_rank) {
  return tp_rank + g->tp * (cp_rank + g->cp * (dp_rank + g->dp * pp_rank));
}

void td_grid_virtual(int dp, int cp, int tp, int pp, int dp_rank, int cp_rank, int tp_rank,
                     int pp_rank, td_grid *out) {
  memset(out, 0, sizeof *out);
  out->dp = dp, out->cp = cp, out->tp = tp, out->pp = pp;
  out->dp_rank = dp_rank, out->cp_rank = cp_rank, out->tp_rank = tp_rank, out->pp_rank = pp_rank;
  out->rank = td_grid_rank_of(out, dp_rank, cp_rank, tp_rank, pp_rank);
  out->size = dp * cp * tp * pp;
  out->world = out->tp_comm = out->cp_comm = out->dp_comm = out->dpcp_comm = out->pp_comm =
      out->embed_comm = MPI_COMM_NULL;
  out->ep_comm = out->edp_comm = MPI_COMM_NULL;
  out->ep = 1, out->edp = dp * cp, out->edp_rank = cp_rank + cp * dp_rank;
  out->nodes = 1, out->local_size = 1;
  out->tp_nodes = out->cp_nodes = out->dp_nodes = out->pp_nodes = 1;
}

/* World rank r's coordinates in the order dp, cp, tp, pp. */
static void coords_of(const td_grid *g, int r, int c[4]) {
  c[2] = r % g->tp;
  c[1] = (r / g->tp) % g->cp;
  c[0] = (r / (g->tp * g->cp)) % g->dp;
  c[3] = r / (g->tp * g->cp * g->dp);
}

/* Index into coords_of's order of a group kind; -1 for 'b' (dp × cp). */
static int kind_axis(char kind) {
  return kind == 'd' ? 0 : kind == 'c' ? 1 : kind == 't' ? 2 : kind == 'p' ? 3 : -1;
}

int td_grid_group_nodes(const td_grid *g, char kind, int r) {
  int c[4], axis = kind_axis(kind), count = 0;
  coords_of(g, r, c);
  /* the members: along one axis, or along dp and cp together ('b') */
  int n = axis < 0 ? g->dp * g->cp : axis == 0 ? g->dp : axis == 1 ? g->cp : axis == 2 ? g->tp : g->pp;
  int *node = malloc((size_t)n * sizeof *node);
  if (!node) return 1;
  for (int i = 0; i < n; ++i) {
    int x[4] = {c[0], c[1], c[2], c[3]};
    if (axis < 0)
      x[0] = i / g->cp, x[1] = i % g->cp;
    else
      x[axis] = i;
    node[i] = g->node_of[td_grid_rank_of(g, x[0], x[1], x[2], x[3])];
    int seen = 0; /* a node counted once: was it met at an earlier member? */
    for (int j = 0; j < i && !seen; ++j) seen = node[j] == node[i];
    count += !seen;
  }
  free(node);
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
  g->cp_nodes = td_grid_group_nodes(g, 'c', g->rank);
  g->dp_nodes = td_grid_group_nodes(g, 'd', g->rank);
  g->pp_nodes = td_grid_group_nodes(g, 'p', g->rank);
  return TD_OK;
}

static td_status split(MPI_Comm world, int color, int key, MPI_Comm *out) {
  TD_MPI_CHECK(MPI_Comm_split(world, color, key, out));
  if (*out != MPI_COMM_NULL) TD_MPI_CHECK(MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN));
  return TD_OK;
}

td_status td_grid_create(MPI_Comm world, int dp, int cp, int tp, int pp, td_grid **out) {
  td_status st = TD_OK;
  *out = NULL;
  td_grid *g = calloc(1, sizeof *g);
  if (!g) TD_FAIL(TD_ERR_NOMEM, "out of memory");
  g->tp_comm = g->cp_comm = g->dp_comm = g->dpcp_comm = g->pp_comm = g->embed_comm =
      g->ep_comm = g->edp_comm = MPI_COMM_NULL;
  g->world = world;
  g->dp = dp, g->cp = cp, g->tp = tp, g->pp = pp;
  int rc = MPI_Comm_rank(world, &g->rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(world, &g->size);
  if (rc != MPI_SUCCESS) {
    st = td_mpi_fail(rc, "MPI_Comm_rank/size", __FILE__, __LINE__, __func__);
    goto done;
  }
  if (g->size != dp * cp * tp * pp)
    TD_FAIL_GOTO(TD_ERR_INTERNAL, "grid %d×%d×%d×%d does not match %d ranks", dp, cp, tp, pp,
                 g->size);
  int c[4];
  coords_of(g, g->rank, c);
  g->dp_rank = c[0], g->cp_rank = c[1], g->tp_rank = c[2], g->pp_rank = c[3];
  g->ep = 1, g->ep_rank = 0, g->edp = dp * cp, g->edp_rank = g->cp_rank + cp * g->dp_rank;
  /* Colors identify the group (the other coordinates), keys order its
   * members by their coordinate. */
  int d = g->dp_rank, x = g->cp_rank, t = g->tp_rank, p = g->pp_rank;
  TD_CHECK_GOTO(split(world, x + cp * (d + dp * p), t, &g->tp_comm));
  TD_CHECK_GOTO(split(world, t + tp * (d + dp * p), x, &g->cp_comm));
  TD_CHECK_GOTO(split(world, t + tp * (x + cp * p), d, &g->dp_comm));
  TD_CHECK_GOTO(split(world, t + tp * p, x + cp * d, &g->dpcp_comm));
  TD_CHECK_GOTO(split(world, t + tp * (x + cp * d), p, &g->pp_comm));
  int ends = p == 0 || p == pp - 1;
  TD_CHECK_GOTO(split(world, ends ? t + tp * (x + cp * d) : MPI_UNDEFINED, p, &g->embed_comm));
  TD_CHECK_GOTO(find_nodes(g));
  td_watchdog_name(world, "the world communicator");
  td_watchdog_name(g->tp_comm, "tp_comm (tensor-parallel group)");
  td_watchdog_name(g->cp_comm, "cp_comm (context-parallel group)");
  td_watchdog_name(g->dp_comm, "dp_comm (data-parallel replicas)");
  td_watchdog_name(g->dpcp_comm, "dpcp_comm (data- × context-parallel ranks: gradients)");
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

td_status td_grid_set_ep(td_grid *g, int ep) {
  int q = g->cp_rank + g->cp * g->dp_rank, n = g->dp * g->cp;
  if (ep < 1 || n % ep != 0)
    TD_FAIL(TD_ERR_INTERNAL, "expert parallelism %d does not divide dp × cp = %d", ep, n);
  g->ep = ep, g->ep_rank = q % ep, g->edp = n / ep, g->edp_rank = q / ep;
  if (g->world == MPI_COMM_NULL) return TD_OK; /* virtual */
  int t = g->tp_rank, p = g->pp_rank, tp = g->tp;
  TD_CHECK(split(g->world, t + tp * (g->edp_rank + g->edp * p), g->ep_rank, &g->ep_comm));
  TD_CHECK(split(g->world, t + tp * (g->ep_rank + ep * p), g->edp_rank, &g->edp_comm));
  td_watchdog_name(g->ep_comm, "ep_comm (expert-parallel group: token all-to-all)");
  td_watchdog_name(g->edp_comm, "edp_comm (ranks holding the same experts: their gradients)");
  return TD_OK;
}

void td_grid_destroy(td_grid **gp) {
  if (!gp || !*gp) return;
  td_grid *g = *gp;
  *gp = NULL;
  MPI_Comm *cs[] = {&g->tp_comm, &g->cp_comm, &g->dp_comm, &g->dpcp_comm, &g->pp_comm,
                    &g->embed_comm, &g->ep_comm, &g->edp_comm};
  for (int i = 0; i < 8 && !td_error_alone(); ++i) /* collective: not when failing alone */
    if (*cs[i] != MPI_COMM_NULL) MPI_Comm_free(cs[i]);
  free(g->node_of);
  free(g);
}
