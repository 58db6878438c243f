/* td_grid.h — the 3-D process grid (DESIGN.md, "Process grid").
 *
 * world = dp × tp × pp, rank = tp_rank + tp·(dp_rank + dp·pp_rank): tensor
 * parallel fastest (one node), then data parallel, then pipeline.
 *
 * Ranks know their node (MPI_COMM_TYPE_SHARED: the ranks that share memory)
 * and which of their groups span nodes: a tensor-parallel group split over
 * the slower inter-node network costs every layer's all-reduces that link. */
#ifndef TD_GRID_H
#define TD_GRID_H

#include <mpi.h>

#include "td_error.h"

typedef struct td_grid {
  int dp, tp, pp;                /* sizes */
  int dp_rank, tp_rank, pp_rank; /* this rank's coordinates */
  int rank, size;                /* in world */
  MPI_Comm world;                /* not owned: the caller's world duplicate */
  MPI_Comm tp_comm;              /* same (dp, pp): tp ranks of one layer shard */
  MPI_Comm dp_comm;              /* same (tp, pp): data-parallel replicas */
  MPI_Comm pp_comm;              /* same (dp, tp): the stages of one pipeline */
  MPI_Comm embed_comm;           /* first and last stage of this pipeline (tied
                                    embeddings); MPI_COMM_NULL on middle stages;
                                    size 1 when pp = 1 */
  /* nodes: node_of[r] is world rank r's node, numbered 0.. in the order of
   * each node's lowest rank; owned */
  int *node_of;
  int node, nodes;               /* this rank's node, the job's node count */
  int local_rank, local_size;    /* on this rank's node */
  int tp_nodes, dp_nodes, pp_nodes; /* nodes this rank's tp/dp/pp group spans */
} td_grid;

/* Build the grid over `world` (whose size must be dp·tp·pp). Collective on world. */
td_status td_grid_create(MPI_Comm world, int dp, int tp, int pp, td_grid **out);
/* Free the communicators. Collective on world (skipped, leaking them, when
 * this rank failed alone: td_error_alone). Accepts NULL; sets *g = NULL. */
void td_grid_destroy(td_grid **g);
/* Nodes that the group of `kind` ('t', 'd' or 'p') through world rank r
 * spans. Not collective. */
int td_grid_group_nodes(const td_grid *g, char kind, int r);
/* World rank of coordinates (dp_rank, tp_rank, pp_rank). */
int td_grid_rank_of(const td_grid *g, int dp_rank, int tp_rank, int pp_rank);

#endif
