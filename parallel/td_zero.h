/* td_zero.h — data-parallel state and gradient synchronisation, ZeRO stages 0–3.
 *
 * The engine owns a rank's parameters, gradients and AdamW moments as flat
 * buffers over the rank's local index space [0, n) (its tensor/pipeline
 * shard, laid out by the caller's registry) and keeps them consistent across
 * dp_comm. The space is cut into dp equal shards of S = ceil(n/dp) elements
 * (the last ones may be partly or wholly padding); dp rank r owns shard r.
 *
 *   stage 0: full parameters, gradients and moments; gradients all-reduced in
 *            buckets launched as backward completes each unit.
 *   stage 1: moments sharded; gradients reduce-scattered into the owned shard
 *            after the last micro-batch; AdamW on the shard; parameters
 *            all-gathered.
 *   stage 2: gradients sharded too: each unit's gradients are computed in a
 *            working buffer and reduce-scattered into the shard every
 *            micro-batch; full parameters.
 *   stage 3: parameters sharded too: a unit's parameters are all-gathered
 *            into a working buffer before use (the next unit prefetched) and
 *            dropped after; persistent memory 16 bytes × n / dp.
 *
 * Precision (opts.pt = TD_DTYPE_BF16): the master parameters, gradients and
 * moments stay float32; the engine also keeps a bf16 working copy of the
 * parameters it holds (the full buffer, at stage 3 the owned shard), made
 * after every change of the masters (set, optimizer, gather), and hands out
 * bf16 parameters: stage 3 gathers them in bf16, half the bytes.
 *
 * Units are contiguous ranges of the local space used together (one
 * transformer block, the embeddings, the final LayerNorm). The caller brackets
 * every use of a unit with td_zero_acquire / td_zero_release. Gradients are
 * SUMMED over dp (the caller scales the loss by the global token count). All
 * communication is on dp_comm; every rank makes the same calls in the same
 * order. The buffers are the back-end's (k->alloc); MPI works on them
 * directly when they are host memory, else on host copies the engine
 * allocates once at creation (staging: zero.c), with the same results. */
#ifndef TD_ZERO_H
#define TD_ZERO_H

#include <mpi.h>
#include <stdint.h>

#include "kernels/td_kernels.h"
#include "parallel/td_coll.h"
#include "td_error.h"

/* Stages 2–3: rotating working buffers for the non-persistent units (the
 * transformer blocks): one in use, the others' reductions in flight. */
#define TD_ZERO_BLOCK_SLOTS 2

typedef struct td_zero_tensor {
  int64_t offset, numel; /* range in the local space */
  int decay;             /* AdamW weight decay applies */
  int in_norm;           /* counted in the gradient norm on this rank */
} td_zero_tensor;

typedef struct td_zero_opts {
  int stage;             /* 0..3 */
  MPI_Comm dp_comm;
  double bucket_bytes;   /* stage 0: all-reduce bucket size */
  int64_t n;             /* local elements */
  int ntensors;
  const td_zero_tensor *tensors;
  int nunits;
  const int64_t *unit_begin, *unit_end; /* ranges; begin ≥ end means empty */
  int persistent_units[2]; /* units kept gathered for the whole step (stage 3), -1: none */
  int step_accum;          /* 1: at stages 2–3 the gradients of persistent_units[0]
                              accumulate over the step's micro-batches in its buffer and
                              are reduced once, at its release in the last micro-batch */
  td_dtype pt;             /* type of the parameters handed out (TD_DTYPE_F32 or TD_DTYPE_BF16) */
  struct td_dcomm *dcomm;  /* device collectives over dp_comm (kernels/td_dcomm.h), or NULL:
                              MPI (on host copies when the memory is not host memory) */
  int staged;              /* size query only (k == NULL): the back-end's memory is not host
                              memory, so count the host staging buffers (with a back-end,
                              !k->host_memory decides) */
  int offload;             /* optimizer offload (optimizer.offload: cpu): the fp32 master
                              parameters, the AdamW moments and a copy of the owned
                              gradients live in host memory (pinned where k has host_alloc),
                              AdamW runs there on `host` and the updated parameters go back
                              to the device in type pt; the device keeps no fp32 parameters
                              in bf16 (only the working copy) and no moments */
  td_kernels *host;        /* offload: the CPU back-end that runs AdamW and the bf16 casts on
                              the host (not owned; NULL for a size query) */
  int overlap_gather;      /* stages 1–2 (device memory MPI or the device collectives reach,
                              no offload): after the optimizer, gather the updated parameters
                              unit by unit with non-blocking calls, each waited for when its
                              unit is first acquired (parallel.overlap_param_gather); 0: all
                              at once, right after the optimizer */
  int group_size, group_rank; /* size query on a virtual grid (dp_comm is MPI_COMM_NULL: a
                                 rank of a grid planned, not built — trident plan): the
                                 data-parallel group's size and this rank's place in it */
} td_zero_opts;

typedef struct td_zero td_zero;

/* Allocates the stage's buffers (not collective: dp_comm is only asked its
 * size and rank). With k == NULL, a size query: nothing is allocated and only
 * td_zero_bytes and td_zero_destroy may be called — `trident check` prints
 * the memory this way, through the code that allocates it. */
td_status td_zero_create(const td_zero_opts *o, td_kernels *k, td_coll_stats *stats, td_zero **out);
void td_zero_destroy(td_zero **z);

/* Set the parameters from a full local host buffer of n floats (every rank
 * passes the same values; stage 3 keeps its shard). */
td_status td_zero_set_params(td_zero *z, const float *host);
/* The full parameter buffer (stages 0–2; NULL at stage 3 and with offload
 * in bf16, where the device holds only the bf16 copy) and the full gradient
 * buffer (stages 0–1; NULL at stages 2–3). */
float *td_zero_params_full(td_zero *z);
float *td_zero_grads_full(td_zero *z);
/* This rank's shard [begin, end) of the local space (clipped to n) and the
 * parameters, gradients and moments of its element `begin`. Every stage has
 * one; checkpoints write it, so replicated data is written once, spread over
 * the replicas. */
void td_zero_owned(const td_zero *z, int64_t *begin, int64_t *end);
/* 1 if the owned parameters and the moments below are host memory (a
 * back-end in host memory, or opts.offload), 0 if they are the back-end's
 * device memory (copy with k->to_host / k->to_device). */
int td_zero_state_on_host(const td_zero *z);
float *td_zero_owned_params(td_zero *z);
float *td_zero_owned_grads(td_zero *z); /* valid after td_zero_finish_grads */
float *td_zero_owned_exp_avg(td_zero *z);
float *td_zero_owned_exp_avg_sq(td_zero *z);

/* The AdamW moment buffers and the local range [begin, end) they cover
 * (stage 0: everything; stages 1–3: the owned shard). */
void td_zero_moments(td_zero *z, float **exp_avg, float **exp_avg_sq, int64_t *begin, int64_t *end);

/* ---- one optimizer step ---------------------------------------------------- */
/* Start a step of `micro` micro-batches: zero the gradients. */
td_status td_zero_begin_step(td_zero *z, int64_t micro);
/* Start micro-batch j (0-based) of the step. */
td_status td_zero_begin_micro(td_zero *z, int64_t j);
/* Make unit u usable: *param (type opts.pt; and, when backward, *grad)
 * point at the unit's first element. Stage 3 gathers (and prefetches the
 * next unit in order). param NULL: the gradients only (the W half of a
 * split backward: nothing gathered); grad NULL: the parameters only (its
 * B half). */
td_status td_zero_acquire(td_zero *z, int u, int backward, void **param, float **grad);
/* Done with unit u; in backward its gradients of this micro-batch are final
 * and their reduction is launched. */
td_status td_zero_release(td_zero *z, int u, int backward);
/* Done with unit u's gradients only (acquired with param NULL): they are
 * final for this micro-batch and their reduction is launched. */
td_status td_zero_release_grads(td_zero *z, int u);
/* Let the non-blocking collectives in flight progress (MPI_Test on each):
 * MPI moves a message only inside MPI calls, so the caller polls between
 * the large kernels of a unit to overlap its communication with compute. */
td_status td_zero_progress(td_zero *z);
/* Finish a forward-only pass (evaluation): drop gathered units. */
td_status td_zero_end_forward(td_zero *z);
/* Wait for every reduction: the owned gradients are the sums over dp. */
td_status td_zero_finish_grads(td_zero *z);
/* Σ g² over the owned gradients of tensors with in_norm, summed over dp. */
td_status td_zero_grad_sumsq(td_zero *z, double *out);
/* Per tensor (per[0..ntensors), the order of opts.tensors): Σ g² over its
 * owned gradients if in_norm, else 0, summed over dp. Collective on
 * dp_comm. */
td_status td_zero_grad_sumsq_tensors(td_zero *z, double *per);
/* Scale the owned gradients. */
td_status td_zero_scale_grads(td_zero *z, float s);
/* AdamW (td_kernels.h semantics) on the owned shard with the gradients
 * times gscale (gradient clipping in the same pass; 1: none), then
 * re-assemble the full parameters where the stage keeps them. */
td_status td_zero_adamw(td_zero *z, float gscale, float lr, float beta1, float beta2, float eps,
                        float weight_decay, int64_t t);
/* After loading owned parameters into td_zero_owned_params: re-assemble the
 * full parameters (stages 1–2; stage 0 loads them whole). Collective. */
td_status td_zero_gather_params(td_zero *z);
/* Wait for the parameter gathers still in flight (overlap_gather): every
 * unit's parameters current. Collective on dp_comm only in that every rank
 * launched the same calls after the same optimizer step; called by
 * td_zero_adamw and td_zero_set_params, and by the trainer when training
 * ends normally (not on an error path: a rank failing alone aborts). */
td_status td_zero_settle(td_zero *z);

/* Bytes this rank's engine allocated (or would: a size query) for
 * parameters (with the bf16 working copy), gradients (full buffer and/or shard), AdamW moments, and
 * working buffers (stages 2–3: per slot a unit's gradients and its
 * reduce-scatter share, at stage 3 also its gathered parameters; slots 0 and
 * 1 sized for the two persistent units, the block slots for the largest
 * other unit; when staging, also the host copies MPI works on: per slot one
 * of its buffer and one of this rank's part of a unit, and at dp > 1 one of
 * the full buffer (stages 0–2) and of the gradient shard (stage 1)). */
void td_zero_bytes(const td_zero *z, int64_t *param, int64_t *grad, int64_t *optim, int64_t *work);
/* Offload: the bytes of host memory holding the optimizer's state (fp32
 * master parameters, the two moments, the owned gradients' host copy and the
 * bf16 upload buffer); 0 without offload. Not part of td_zero_bytes, which
 * counts the back-end's memory (and the MPI staging copies). */
int64_t td_zero_host_bytes(const td_zero *z);
/* Stages 2–3: the smallest number of gradient reductions launched between a
 * block slot's launch and its reuse (INT64_MAX if none was reused). With the
 * oldest slot reused first it is at least TD_ZERO_BLOCK_SLOTS; 1 would mean a
 * reduction is waited for right after the next one is launched. */
int64_t td_zero_slot_reuse_min(const td_zero *z);

#endif
