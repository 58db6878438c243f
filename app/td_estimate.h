/* td_estimate.h — memory per rank and FLOPs, from the deck and the registry. */
#ifndef TD_ESTIMATE_H
#define TD_ESTIMATE_H

#include <stdint.h>

#include "app/td_config.h"
#include "app/td_registry.h"

typedef struct td_estimate {
  int64_t params_local;   /* parameter elements this rank holds (tp shard, stage) */
  int64_t param_bytes;    /* persistent parameter memory (after ZeRO-3 sharding) */
  int64_t grad_bytes;     /* gradients (ZeRO-2/3 sharded) */
  int64_t optim_bytes;    /* AdamW moments (ZeRO-1+ sharded) */
  int64_t gathered_bytes; /* ZeRO-3 working set: two gathered layers */
  int64_t act_bytes;      /* activations kept for backward, all live micro-batches */
  int64_t live_micro;     /* micro-batches whose activations are alive at once */
  double flops_per_token; /* training (forward + backward) */
  double flops_per_step;
} td_estimate;

/* Estimate for pipeline stage `stage` given this rank's registry. */
void td_estimate_rank(const td_config *cfg, const td_registry *r, int stage, td_estimate *e);
/* Model FLOPs per token for training: 6·N_matmul + 12·L·C·T (PaLM). */
double td_flops_per_token(const td_config *cfg);

#endif
