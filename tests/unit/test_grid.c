/* test_grid.c — the process grid (docs/architecture.md, "Process grid").
 *
 * Run as mpiexec -n W test_grid (W = 1, 2, 4, 8, ...). For every (dp, cp,
 * tp, pp) with dp·cp·tp·pp = W, builds the grid over a duplicate of
 * MPI_COMM_WORLD and checks, on every rank:
 *   - coordinates follow rank = tp_rank + tp·(cp_rank + cp·(dp_rank +
 *     dp·pp_rank));
 *   - tp_comm, cp_comm, dp_comm, dpcp_comm (dp × cp, rank cp + cp·dp),
 *     pp_comm have the right sizes, this rank's rank in each
 *     is its coordinate, and the members (world ranks, gathered) are exactly
 *     the expected ranks in coordinate order;
 *   - embed_comm is MPI_COMM_NULL exactly on middle stages, otherwise holds
 *     {first, last} stage of the same (dp, cp, tp) (size 1 when pp == 1);
 *   - on one node every group spans one node;
 *   - td_grid_rank_of is the inverse of the coordinates, for every rank;
 *   - a shape that does not match the world size is an error on every rank
 *     (no hang), and td_grid_destroy accepts NULL.
 * Rank 0 prints one line per failed check and "N passed, M failed"; the exit
 * status is non-zero on any failure on any rank. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/td_grid.h"
#include "td_error.h"

static int g_pass, g_fail;
static int g_rank;

#define EXPECT(cond, ...)                                               \
  do {                                                                  \
    if (cond) {                                                         \
      ++g_pass;                                                         \
    } else {                                                            \
      ++g_fail;                                                         \
      fprintf(stderr, "[rank %d] FAIL %s:%d: ", g_rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                     \
      fputc('\n', stderr);                                              \
    }                                                                   \
  } while (0)

/* Check that comm's members, in comm rank order, are the world ranks
 * expect[0..n). comm must not be MPI_COMM_NULL. */
static void check_members(MPI_Comm comm, const char *what, const int *expect, int n,
                          int world_rank, const char *shape) {
  int size = -1, me = -1;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &me);
  EXPECT(size == n, "%s %s: size %d, expected %d", shape, what, size, n);
  if (size != n) return;
  int *got = malloc(sizeof *got * (size_t)n);
  MPI_Allgather(&world_rank, 1, MPI_INT, got, 1, MPI_INT, comm);
  int same = 1;
  for (int i = 0; i < n; ++i) same &= got[i] == expect[i];
  char gbuf[256] = "", ebuf[256] = "";
  if (!same)
    for (int i = 0; i < n; ++i) {
      size_t gl = strlen(gbuf), el = strlen(ebuf);
      snprintf(gbuf + gl, sizeof gbuf - gl, " %d", got[i]);
      snprintf(ebuf + el, sizeof ebuf - el, " %d", expect[i]);
    }
  EXPECT(same, "%s %s: members {%s } in comm order, expected {%s }", shape, what, gbuf, ebuf);
  free(got);
}

static void check_shape(MPI_Comm world, int dp, int cp, int tp, int pp) {
  char shape[64];
  snprintf(shape, sizeof shape, "grid (dp %d, cp %d, tp %d, pp %d)", dp, cp, tp, pp);
  int rank, size;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  td_grid *g = NULL;
  td_status st = td_grid_create(world, dp, cp, tp, pp, &g);
  EXPECT(st == TD_OK && g != NULL, "%s: td_grid_create failed: %s", shape, td_error_message());
  /* Every rank must agree that creation worked before using the comms. */
  int ok = st == TD_OK && g != NULL, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, world);
  if (!all_ok) {
    td_error_clear();
    td_grid_destroy(&g);
    return;
  }
  EXPECT(g->dp == dp && g->cp == cp && g->tp == tp && g->pp == pp, "%s: sizes (%d, %d, %d, %d)",
         shape, g->dp, g->cp, g->tp, g->pp);
  EXPECT(g->rank == rank && g->size == size, "%s: rank/size %d/%d, expected %d/%d", shape,
         g->rank, g->size, rank, size);
  int t = rank % tp, c = (rank / tp) % cp, d = (rank / (tp * cp)) % dp, p = rank / (tp * cp * dp);
  EXPECT(g->tp_rank == t && g->cp_rank == c && g->dp_rank == d && g->pp_rank == p,
         "%s: world rank %d has (dp %d, cp %d, tp %d, pp %d), expected (dp %d, cp %d, tp %d, "
         "pp %d)", shape, rank, g->dp_rank, g->cp_rank, g->tp_rank, g->pp_rank, d, c, t, p);
  EXPECT(g->tp_rank + tp * (g->cp_rank + cp * (g->dp_rank + dp * g->pp_rank)) == rank,
         "%s: rank %d != tp + tp·(cp + cp·(dp + dp·pp)) of its coordinates", shape, rank);
  EXPECT(td_grid_rank_of(g, d, c, t, p) == rank,
         "%s: td_grid_rank_of(own coordinates) = %d, expected %d", shape,
         td_grid_rank_of(g, d, c, t, p), rank);
  /* td_grid_rank_of is a bijection onto 0..size-1 and inverts the formula. */
  int bij = 1;
  char *seen = calloc((size_t)size, 1);
  for (int pi = 0; pi < pp; ++pi)
    for (int di = 0; di < dp; ++di)
      for (int ci = 0; ci < cp; ++ci)
        for (int ti = 0; ti < tp; ++ti) {
          int r = td_grid_rank_of(g, di, ci, ti, pi);
          if (r < 0 || r >= size || seen[r] || r % tp != ti || (r / tp) % cp != ci ||
              (r / (tp * cp)) % dp != di || r / (tp * cp * dp) != pi)
            bij = 0;
          else
            seen[r] = 1;
        }
  free(seen);
  EXPECT(bij, "%s: td_grid_rank_of is not the inverse of the rank formula", shape);

  int *expect = malloc(sizeof *expect * (size_t)(size + 2));
  int me;
  /* tp_comm: same (dp, cp, pp), ordered by tp. */
  EXPECT(g->tp_comm != MPI_COMM_NULL, "%s: tp_comm is MPI_COMM_NULL", shape);
  if (g->tp_comm != MPI_COMM_NULL) {
    for (int i = 0; i < tp; ++i) expect[i] = td_grid_rank_of(g, d, c, i, p);
    check_members(g->tp_comm, "tp_comm", expect, tp, rank, shape);
    MPI_Comm_rank(g->tp_comm, &me);
    EXPECT(me == t, "%s: rank in tp_comm %d, expected tp_rank %d", shape, me, t);
  }
  /* cp_comm: same (dp, tp, pp), ordered by cp. */
  EXPECT(g->cp_comm != MPI_COMM_NULL, "%s: cp_comm is MPI_COMM_NULL", shape);
  if (g->cp_comm != MPI_COMM_NULL) {
    for (int i = 0; i < cp; ++i) expect[i] = td_grid_rank_of(g, d, i, t, p);
    check_members(g->cp_comm, "cp_comm", expect, cp, rank, shape);
    MPI_Comm_rank(g->cp_comm, &me);
    EXPECT(me == c, "%s: rank in cp_comm %d, expected cp_rank %d", shape, me, c);
  }
  /* dp_comm: same (cp, tp, pp), ordered by dp. */
  EXPECT(g->dp_comm != MPI_COMM_NULL, "%s: dp_comm is MPI_COMM_NULL", shape);
  if (g->dp_comm != MPI_COMM_NULL) {
    for (int i = 0; i < dp; ++i) expect[i] = td_grid_rank_of(g, i, c, t, p);
    check_members(g->dp_comm, "dp_comm", expect, dp, rank, shape);
    MPI_Comm_rank(g->dp_comm, &me);
    EXPECT(me == d, "%s: rank in dp_comm %d, expected dp_rank %d", shape, me, d);
  }
  /* dpcp_comm: same (tp, pp), ordered by cp + cp·dp. */
  EXPECT(g->dpcp_comm != MPI_COMM_NULL, "%s: dpcp_comm is MPI_COMM_NULL", shape);
  if (g->dpcp_comm != MPI_COMM_NULL) {
    for (int i = 0; i < dp * cp; ++i) expect[i] = td_grid_rank_of(g, i / cp, i % cp, t, p);
    check_members(g->dpcp_comm, "dpcp_comm", expect, dp * cp, rank, shape);
    MPI_Comm_rank(g->dpcp_comm, &me);
    EXPECT(me == c + cp * d, "%s: rank in dpcp_comm %d, expected %d", shape, me, c + cp * d);
  }
  /* pp_comm: same (dp, cp, tp), ordered by stage. */
  EXPECT(g->pp_comm != MPI_COMM_NULL, "%s: pp_comm is MPI_COMM_NULL", shape);
  if (g->pp_comm != MPI_COMM_NULL) {
    for (int i = 0; i < pp; ++i) expect[i] = td_grid_rank_of(g, d, c, t, i);
    check_members(g->pp_comm, "pp_comm", expect, pp, rank, shape);
    MPI_Comm_rank(g->pp_comm, &me);
    EXPECT(me == p, "%s: rank in pp_comm %d, expected pp_rank %d", shape, me, p);
  }
  /* embed_comm: {first, last} stage of this (dp, cp, tp); NULL on middle stages. */
  int end = p == 0 || p == pp - 1;
  if (!end) {
    EXPECT(g->embed_comm == MPI_COMM_NULL, "%s: middle stage %d has an embed_comm", shape, p);
  } else {
    EXPECT(g->embed_comm != MPI_COMM_NULL, "%s: end stage %d has no embed_comm", shape, p);
    if (g->embed_comm != MPI_COMM_NULL) {
      int n = 0;
      expect[n++] = td_grid_rank_of(g, d, c, t, 0);
      if (pp > 1) expect[n++] = td_grid_rank_of(g, d, c, t, pp - 1);
      check_members(g->embed_comm, "embed_comm", expect, n, rank, shape);
      MPI_Comm_rank(g->embed_comm, &me);
      EXPECT(me == (p == 0 ? 0 : n - 1), "%s: rank in embed_comm %d on stage %d", shape, me, p);
    }
  }
  free(expect);
  /* The communicators work: a sum over tp_comm of tp_rank is tp(tp-1)/2. */
  if (g->tp_comm != MPI_COMM_NULL) {
    int sum = -1;
    MPI_Allreduce(&g->tp_rank, &sum, 1, MPI_INT, MPI_SUM, g->tp_comm);
    EXPECT(sum == tp * (tp - 1) / 2, "%s: allreduce over tp_comm gave %d", shape, sum);
  }
  /* One node (this test's ranks share memory): every group spans one. */
  EXPECT(g->nodes == 1 && td_grid_group_nodes(g, 'b', rank) == 1 && g->cp_nodes == 1,
         "%s: %d nodes, dp × cp group over %d, cp group over %d", shape, g->nodes,
         td_grid_group_nodes(g, 'b', rank), g->cp_nodes);
  td_grid_destroy(&g);
  EXPECT(g == NULL, "%s: td_grid_destroy did not clear the pointer", shape);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm world;
  MPI_Comm_dup(MPI_COMM_WORLD, &world);
  MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN);
  int size;
  MPI_Comm_rank(world, &g_rank);
  MPI_Comm_size(world, &size);

  /* Every ordered factorisation of the world size into (dp, cp, tp, pp),
   * e.g. at 8: (8,1,1,1), (1,8,1,1), ..., (2,2,2,1), (1,2,2,2), ... */
  int shapes = 0;
  for (int dp = 1; dp <= size; ++dp)
    for (int cp = 1; cp <= size; ++cp)
      for (int tp = 1; tp <= size; ++tp)
        for (int pp = 1; pp <= size; ++pp)
          if (dp * cp * tp * pp == size) {
            check_shape(world, dp, cp, tp, pp);
            ++shapes;
          }
  EXPECT(shapes >= 1, "no shape tested");

  /* A shape that does not match the world is an error on every rank. */
  td_grid *bad = NULL;
  td_status st = td_grid_create(world, size + 1, 1, 1, 1, &bad);
  EXPECT(st != TD_OK && bad == NULL, "grid (dp %d, tp 1, pp 1) on %d ranks was accepted",
         size + 1, size);
  td_error_clear();
  td_grid_destroy(&bad);
  td_grid_destroy(NULL);

  int local[2] = {g_pass, g_fail}, total[2] = {0, 0};
  MPI_Reduce(local, total, 2, MPI_INT, MPI_SUM, 0, world);
  int any_fail = 0;
  MPI_Allreduce(&g_fail, &any_fail, 1, MPI_INT, MPI_MAX, world);
  if (g_rank == 0)
    printf("test_grid on %d rank%s, %d shapes: %d passed, %d failed\n", size,
           size == 1 ? "" : "s", shapes, total[0], total[1]);
  MPI_Comm_free(&world);
  MPI_Finalize();
  return any_fail ? 1 : 0;
}
