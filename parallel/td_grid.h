/* td_grid.h — the process grid (docs/architecture.md, "Process grid").
 *
 * world = dp × cp × tp × pp, rank = tp_rank + tp·(cp_rank + cp·(dp_rank +
 * dp·pp_rank)): tensor parallel fastest (one node), then context parallel,
 * then data parallel, then pipeline (Megatron's order). Parameters are
 * replicated over dp and cp; gradients are summed over both (dpcp_comm).
 *
 * Ranks know their node (MPI_COMM_TYPE_SHARED: the ranks that share memory)
 * and which of their groups span nodes: a tensor-parallel group split over
 * the slower inter-node network costs every layer's all-reduces that link. */
#ifndef TD_GRID_H
#define TD_GRID_H

#include <mpi.h>

#include "td_error.h"

typedef struct td_grid {
  int dp, cp, tp, pp;                     /* sizes */
  int dp_rank, cp_rank, tp_rank, pp_rank; /* this rank's coordinates */
  int rank, size;                /* in world */
  MPI_Comm world;                /* not owned: the caller's world duplicate */
  MPI_Comm tp_comm;              /* same (dp, cp, pp): tp ranks of one layer shard */
  MPI_Comm cp_comm;              /* same (dp, tp, pp): the parts of the same sequences */
  MPI_Comm dp_comm;              /* same (cp, tp, pp): data-parallel replicas */
  MPI_Comm dpcp_comm;            /* same (tp, pp): dp × cp, rank cp_rank + cp·dp_rank —
                                    the ranks of one parameter shard that see different
                                    tokens: gradients and the loss sum over it, ZeRO
                                    shards over it */
  MPI_Comm pp_comm;              /* same (dp, cp, tp): the stages of one pipeline */
  /* expert parallelism (td_grid_set_ep; ep 1 until then): the dp × cp group
   * of q = cp_rank + cp·dp_rank splits into ep_comm (ep_rank = q mod ep, the
   * ranks that hold different experts and exchange tokens all-to-all) and
   * edp_comm (edp_rank = q / ep, the dp·cp/ep ranks holding the same experts:
   * their gradients sum over it, ZeRO shards them over it) */
  int ep, ep_rank, edp, edp_rank;
  MPI_Comm ep_comm, edp_comm;    /* owned; MPI_COMM_NULL until td_grid_set_ep */
  MPI_Comm embed_comm;           /* first and last stage of this pipeline (tied
                                    embeddings); MPI_COMM_NULL on middle stages;
                                    size 1 when pp = 1 */
  /* nodes: node_of[r] is world rank r's node, numbered 0.. in the order of
   * each node's lowest rank; owned */
  int *node_of;
  int node, nodes;               /* this rank's node, the job's node count */
  int local_rank, local_size;    /* on this rank's node */
  int tp_nodes, cp_nodes, dp_nodes, pp_nodes; /* nodes this rank's tp/cp/dp/pp group spans */
} td_grid;

/* Build the grid over `world` (whose size must be dp·cp·tp·pp). Collective on world. */
td_status td_grid_create(MPI_Comm world, int dp, int cp, int tp, int pp, td_grid **out);
/* A virtual grid: sizes and this rank's coordinates set, every communicator
 * MPI_COMM_NULL, one node (node_of NULL). Only for size queries of what a
 * rank of a grid that is planned, not built, would allocate (td_trainer_plan:
 * trident plan). Nothing to destroy. Not collective. */
void td_grid_virtual(int dp, int cp, int tp, int pp, int dp_rank, int cp_rank, int tp_rank,
                     int pp_rank, td_grid *out);
/* Expert parallelism of size ep (dividing dp·cp): the ranks and, on a
 * built grid, ep_comm and edp_comm. Collective on world (a virtual grid:
 * the ranks only). */
td_status td_grid_set_ep(td_grid *g, int ep);
/* Free the communicators. Collective on world (skipped, leaking them, when
 * this rank failed alone: td_error_alone). Accepts NULL; sets *g = NULL. */
void td_grid_destroy(td_grid **g);
/* Nodes that the group of `kind` ('t', 'c', 'd', 'p', or 'b' for dp × cp)
 * through world rank r spans. Not collective. */
int td_grid_group_nodes(const td_grid *g, char kind, int r);
/* World rank of coordinates (dp_rank, cp_rank, tp_rank, pp_rank). */
int td_grid_rank_of(const td_grid *g, int dp_rank, int cp_rank, int tp_rank, int pp_rank);

#endif
