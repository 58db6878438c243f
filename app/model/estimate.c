/* estimate.c — model FLOPs per token (trident check, MFU). */
#include "app/model/td_estimate.h"

/* 6 FLOPs per matmul weight per token (forward 2, backward 4), plus the
 * attention products Q·Kᵀ and att·V over the causal window counted in full
 * (12·L·(heads·head size)·T): the weights per family from td_config_dims,
 * the numbers the registry allocates. A sparse block (model.moe) counts the
 * weights a token uses: its router and top_k experts (active parameters). */
double td_flops_per_token(const td_config *cfg) {
  td_model_dims d;
  td_config_dims(cfg, &d);
  double L = (double)d.L, T = (double)d.T, A = (double)(d.H * d.HS);
  double Lm = (double)d.moe_layers;
  double n_matmul = (L - Lm) * (double)d.block_matmul + Lm * (double)d.moe_matmul +
                    (double)d.V * (double)d.C; /* + head */
  return 6.0 * n_matmul + 12.0 * L * A * T;
}
