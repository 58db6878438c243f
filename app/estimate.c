/* estimate.c — per-rank memory and FLOPs estimates (trident check). */
#include "app/td_estimate.h"

double td_flops_per_token(const td_config *cfg) {
  double L = (double)cfg->model_layers, C = (double)cfg->model_dim;
  double V = (double)cfg->model_vocab_size, T = (double)cfg->model_seq_len;
  double n_matmul = L * 12.0 * C * C + V * C; /* blocks + LM head */
  return 6.0 * n_matmul + 12.0 * L * C * T;
}

void td_estimate_rank(const td_config *cfg, const td_registry *r, int stage, td_estimate *e) {
  int64_t dp = cfg->parallel_dp, tp = cfg->parallel_tp, pp = cfg->parallel_pp;
  int zero = (int)cfg->parallel_zero;
  int64_t n = 0, layer_max = 0;
  for (int i = 0; i < r->n; ++i) n += r->p[i].local_numel;
  /* largest block (for the ZeRO-3 gathered working set) */
  for (int l = 0; l < cfg->model_layers; ++l) {
    int64_t s = 0;
    for (int i = 0; i < r->n; ++i)
      if (r->p[i].layer == l) s += r->p[i].local_shape[0] * r->p[i].local_shape[1];
    if (s > layer_max) layer_max = s;
  }
  e->params_local = n;
  int64_t shard = (n + dp - 1) / dp;
  e->param_bytes = 4 * (zero >= 3 ? shard : n);
  e->grad_bytes = 4 * (zero >= 2 ? shard : n);
  e->optim_bytes = 8 * (zero >= 1 ? shard : n);
  e->gathered_bytes = zero >= 3 ? 2 * 4 * layer_max : 0;

  int64_t B = td_config_micro_batch(cfg), T = cfg->model_seq_len, C = cfg->model_dim;
  int64_t NH = cfg->model_heads / tp, Vp = (cfg->model_vocab_size + tp - 1) / tp;
  int64_t first, count;
  td_config_stage_layers(cfg, stage, &first, &count);
  /* per layer: ln1, qkv/tp, atty/tp, res, ln2, fch/tp, gelu/tp, res; att probs; LN stats */
  int64_t per_layer = B * T * (C + 3 * C / tp + C / tp + C + C + 4 * C / tp + 4 * C / tp + C) +
                      B * NH * T * T + 4 * B * T;
  int64_t acts = count * per_layer;
  if (stage == 0) acts += B * T * C;                         /* embedding output */
  if (stage == pp - 1) acts += B * T * C + 2 * B * T + B * T * Vp; /* ln_f, stats, logits */
  int64_t m = td_config_accum_steps(cfg);
  int64_t live = 1;
  if (pp > 1) {
    int gpipe = cfg->parallel_pp_schedule[0] == 'g';
    live = gpipe ? m : (pp - stage < m ? pp - stage : m);
  }
  e->live_micro = live;
  e->act_bytes = 4 * acts * live;
  e->flops_per_token = td_flops_per_token(cfg);
  e->flops_per_step = e->flops_per_token * (double)cfg->training_global_batch * (double)T;
}
