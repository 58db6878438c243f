/* td_plan.h — the planner (trident plan): predicted memory, step time and
 * MFU of a configuration on a cluster, from the code that trains it.
 *
 * Memory: td_trainer_plan on a virtual grid (td_grid_virtual), the allocating
 * code's size query. FLOPs: td_flops_per_token. Pipeline bubble: the deck's
 * schedule (td_pipe_schedule) timed by td_schedule_simulate with this file's
 * per-stage costs. Communication: td_plan_comm, the bytes per step that the
 * collectives count in the metrics (comm_bytes), per group and kind; a test
 * (tests/plan/comm_bytes.sh) trains small grids and demands equality. Time:
 * an α–β model per link (intra-node when the group lies inside a node) and
 * matmul time at peak × a stated efficiency (the cluster file). */
#ifndef TD_PLAN_H
#define TD_PLAN_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>

#include "app/deck/td_config.h"
#include "app/train/td_trainer.h"
#include "parallel/td_coll.h"
#include "td_error.h"

/* A link: bandwidth per device in bytes/s (one direction) and latency in s;
 * the fraction of it a collective's ring reaches on large messages (NCCL's
 * bus bandwidth over the link's) and the message size at which it reaches
 * half of that (0: every size at the large rate). */
typedef struct td_link {
  double bw, lat;
  double bus_eff, half_bytes;
} td_link;

/* How the data-parallel collectives overlap compute (links.overlap_dp). */
typedef enum {
  TD_OVERLAP_DP_TRIDENT = 0, /* as trident runs each ZeRO stage (docs/plan.md) */
  TD_OVERLAP_DP_NONE,        /* every gradient reduction and parameter gather exposed */
  TD_OVERLAP_DP_GRADS,       /* gradients reduced during the last micro-batch's backward,
                                parameters gathered after the optimizer (exposed) */
  TD_OVERLAP_DP_ALL          /* ... and parameters gathered during the next forward
                                (Megatron's --overlap-grad-reduce --overlap-param-gather) */
} td_overlap_dp;

/* A cluster file (inputs/clusters, docs/plan.md). */
typedef struct td_cluster {
  char path[TD_STR_MAX];
  char name[128], device[128];
  int nodes, devices_per_node;
  double peak_fp32, peak_bf16; /* FLOP/s per device (matmul) */
  double mem_bytes;            /* per device (a CPU "device" is one rank's share of the node) */
  double mem_bw;               /* bytes/s per device (optimizer, memory-bound work) */
  double eff_large, eff_small; /* matmul efficiency (of peak) for large and small shapes */
  double small_dim;            /* a matmul whose smallest dimension is below this is small */
  td_link intra, inter;
  double ew_passes;            /* device.elementwise_passes: passes the non-matmul kernels
                                  (norms, activations, residual adds, casts) make over a
                                  layer's activations in forward, at memory_gbps; backward
                                  makes twice as many. 0 (default): folded into
                                  matmul_efficiency, as the published GPU efficiencies are */
  double att_rate;             /* FLOP/s of the attention kernels (their 12·A·T per token,
                                  device.attention_tflops); 0: at the matmul rate */
  double fatt_rate;            /* FLOP/s of the fused attention kernels (their 18·A·T per
                                  token: the backward makes the scores again; CPU clusters,
                                  device.fused_attention_tflops); 0: at att_rate */
  double baseline;             /* bytes a rank holds besides trident's buffers (MPI, libraries,
                                  the back-end), device.baseline_mib; 0 when not calibrated */
  double rs_ratio, ag_ratio;   /* links.reduce_scatter, links.all_gather: the bandwidth a
                                  (nonblocking, as trident calls them) reduce-scatter and
                                  all-gather reach over the all-reduce's, in the bytes the
                                  planner counts; default 1 */
  double small_bytes;          /* links.small_mib: collectives moving at most this many bytes
                                  a call (a rank's ring volume) are small; 0 (default): none */
  double small_ar, small_rs, small_ag; /* links.small_all_reduce, _reduce_scatter,
                                  _all_gather: a small collective's bandwidth over the (large)
                                  all-reduce's β; default 1 */
  double overlap;              /* links.overlap: the fraction of a nonblocking collective that
                                  proceeds while the rank computes (1: a GPU's collectives run
                                  beside its kernels; a CPU core that computes cannot also
                                  move the bytes: ~0); default 1 */
  /* The GPU model (plan_device.c), used when sms > 0: each product's time by
   * its shape, the non-matmul kernels by their bytes. */
  int sms;                     /* device.sms: streaming multiprocessors; 0: the efficiency model */
  double tile_m, tile_n;       /* device.gemm_tile: the output tile a library kernel computes
                                  per SM (default 256 × 128) */
  double gemm_eff;             /* device.gemm_efficiency: fraction of peak a full wave of tiles
                                  reaches */
  double att_eff;              /* device.attention_efficiency: fraction of peak the fused
                                  attention reaches on the FLOPs it does (0: its products as
                                  gemms) */
  double kernel_s;             /* device.kernel_us: a kernel's launch and tail, s (default 0) */
  /* What the system being predicted overlaps (published runs; trident's own
   * by default). */
  double overlap_tp;           /* links.overlap_tp: fraction of the tp collectives hidden behind
                                  the matmuls (0: trident's are blocking) */
  td_overlap_dp overlap_dp;    /* links.overlap_dp */
} td_cluster;

/* Seconds of one layer (or the head) for one micro-batch on one rank: forward,
 * backward's input gradients (with the attention's) and weight gradients;
 * of which the attention forward, backward and what `recompute: attention`
 * repeats, and the non-matmul kernels' forward. */
typedef struct td_plan_cost {
  double f, bx, bw;
  double att_f, att_b, att_rec, ew_f;
} td_plan_cost;

/* The GPU model (c->sms > 0): a product of M×K by K×N, `batch` of them, es
 * bytes an element, at `peak` FLOP/s (app/plan/plan_device.c). */
double td_plan_gemm_s(const struct td_cluster *c, double M, double N, double K, double batch,
                      double es, double peak);
void td_plan_layer_cost(const td_config *cfg, const struct td_cluster *c, int64_t micro,
                        td_plan_cost *out);
void td_plan_head_cost(const td_config *cfg, const struct td_cluster *c, int64_t micro,
                       td_plan_cost *out);
/* Set one key of a loaded cluster file (--cluster-set key=value). */
td_status td_cluster_set(td_cluster *c, const char *kv);

/* Read and check a cluster file; errors name the file, line:column and key
 * (TD_ERR_DECK, exit 2). Not collective. */
td_status td_cluster_load(const char *path, td_cluster *out);
/* Print it as a cluster file (--calibrate). */
void td_cluster_print(const td_cluster *c, FILE *out);

/* What --calibrate measured besides the cluster file: matmul FLOP/s at
 * large and small shapes ([0] fp32, [1] bf16), MPI point-to-point and
 * all-reduce latency (s) and bandwidth (bytes/s), the all-reduce's raw times. */
typedef struct td_calibration {
  double large[2], small[2];
  double att;  /* attention kernels, fp32, forward + backward */
  double fatt; /* the fused attention kernels, the same (FLOPs: 18·A·T a token) */
  double p2p_lat, p2p_bw, ar_lat, ar_bw, ar_small_s, ar_big_s;
  double ov_comm_s, ov_compute_s, ov_both_s; /* the overlap measurement (links.overlap) */
  double rs_s, ag_s;                         /* 64 MiB reduce-scatter and all-gather */
  double ar_mid_s, rs_mid_s, ag_mid_s;       /* the same three kinds at 16 MiB */
} td_calibration;

/* Measure this machine (app/plan/plan_calibrate.c): the CPU back-end's gemm rate
 * per precision, memory bandwidth, MPI between ranks 0 and 1, the process's
 * resident baseline; c is a cluster file of one node of comm's ranks (the
 * same on every rank). Needs 2 ranks or more. Collective on comm. */
td_status td_plan_calibrate(MPI_Comm comm, td_cluster *c, td_calibration *cal);
/* The measurements as comment lines of a cluster file. */
void td_calibration_print(const td_calibration *cal, FILE *out);

/* What --calibrate --device cuda measured (app/plan/plan_calibrate_gpu.c). */
#define TD_CAL_SHAPES 6
#define TD_CAL_SIZES 8
typedef struct td_gpu_calibration {
  int64_t peak_shape[3];
  double rate_peak[2];                 /* [0] fp32, [1] bf16 FLOP/s on the peak shape */
  int64_t shape[TD_CAL_SHAPES][3];     /* M, N, K */
  double rate[TD_CAL_SHAPES], model[TD_CAL_SHAPES]; /* bf16 FLOP/s measured, tile model */
  double att_rate;                     /* the fused attention's FLOP/s (causal, bf16) */
  int sizes, links_measured;
  double size[TD_CAL_SIZES], ar_s[TD_CAL_SIZES], busbw[TD_CAL_SIZES];
} td_gpu_calibration;

/* Measure this node's GPUs (every rank its own: the local rank's, as
 * training picks it) into a cluster file of the GPU model. Collective on
 * comm; links need 2 ranks or more and NCCL. */
td_status td_plan_calibrate_gpu(MPI_Comm comm, td_cluster *c, td_gpu_calibration *g);
void td_gpu_calibration_print(const td_gpu_calibration *g, const td_cluster *c, FILE *out);

/* Bytes one rank sends and receives per optimizer step, counted as the
 * collectives count them (parallel/coll_mpi.c, zero.c, pipeline.c: ring
 * volume per rank), per group (TD_GROUP_*) and kind (TD_COLL_*), for the
 * rank with dp, cp and tp rank 0 on pipeline stage `stage`; and the calls. */
typedef struct td_plan_comm {
  double bytes[TD_GROUP_COUNT][TD_COLL_KINDS];
  double calls[TD_GROUP_COUNT][TD_COLL_KINDS];
} td_plan_comm;
td_status td_plan_comm_bytes(const td_config *cfg, int stage, td_plan_comm *out);

/* One configuration's prediction. */
typedef struct td_plan_result {
  td_config cfg;          /* the configuration (resolved deck) */
  td_mem_plan mem;        /* the rank with the most memory (first or last stage) */
  int64_t mem_total;      /* its bytes */
  int mem_stage;          /* its stage */
  double baseline;        /* the cluster's process baseline (device.baseline_mib), bytes */
  double startup;         /* the start-up's host copy of the parameters (mem.startup) when
                             the device's memory is the host's (run.device cpu), else 0 */
  double ckpt;            /* checkpoint staging (mem.ckpt) when the device's memory is the
                             host's, else 0: allocated when training starts, after the
                             start-up copy is freed, so the peak holds the larger of the two */
  int fits;               /* mem_total + baseline + max(startup, ckpt) ≤ the device's memory */
  double over_bytes;      /* mem_total − memory when it does not fit */
  char refused[256];      /* why trident would refuse to build it (memory unknown, fits 0),
                             e.g. a ZeRO shard beyond MPI's int counts; "" when it builds */
  double model_flops;     /* per step, all ranks: td_flops_per_token × tokens */
  double hw_flops;        /* + recomputation */
  double compute_s;       /* per step on the slowest stage: matmuls and attention */
  double step_s, tokens_per_s;
  double tflops;          /* model FLOP/s per device / 1e12 */
  double hw_tflops;       /* hardware FLOP/s per device (with recompute) / 1e12 */
  double mfu;             /* model FLOP/s per device / peak */
  double bubble;          /* pipeline: idle over compute time, slowest stage (simulated) */
  double eff;             /* the matmul efficiency used */
  double comm_s[TD_GROUP_COUNT];    /* time in each group's communication per step */
  double exposed_s[TD_GROUP_COUNT]; /* ... of it not overlapped with compute */
  double comm_bytes;      /* per step, the largest stage's rank (metrics comm_bytes) */
  double optim_s;         /* the optimizer step (memory bound) */
} td_plan_result;

/* Predict cfg (a checked deck: its grid, schedule, ZeRO stage, ...) on
 * cluster c. Not collective; allocates nothing of the model's. */
td_status td_plan_eval(const td_config *cfg, const td_cluster *c, td_plan_result *out);

/* Name of a group for output ("tp", "dp", "pp", "embed", "cp"). */
const char *td_plan_group_name(int group);

#endif
