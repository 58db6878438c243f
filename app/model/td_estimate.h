/* td_estimate.h — model FLOPs (trident check, MFU). Memory is not estimated:
 * check asks the model and the ZeRO engine what they allocate
 * (td_trainer_plan). */
#ifndef TD_ESTIMATE_H
#define TD_ESTIMATE_H

#include "app/deck/td_config.h"

/* Model FLOPs per token for training: 6·N_matmul + 12·L·C·T (PaLM). */
double td_flops_per_token(const td_config *cfg);

#endif
