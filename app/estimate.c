/* estimate.c — model FLOPs per token (trident check, MFU). */
#include "app/td_estimate.h"

double td_flops_per_token(const td_config *cfg) {
  double L = (double)cfg->model_layers, C = (double)cfg->model_dim;
  double V = (double)cfg->model_vocab_size, T = (double)cfg->model_seq_len;
  double n_matmul = L * 12.0 * C * C + V * C; /* blocks + LM head */
  return 6.0 * n_matmul + 12.0 * L * C * T;
}
