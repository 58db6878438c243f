/* check.c — `trident check DECK`: validate, print the resolved deck, the grid,
 * the parameter count, memory per rank and FLOPs, without training. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/cli/td_cli.h"
#include "app/model/td_estimate.h"
#include "app/plan/td_plan.h"
#include "app/train/td_pipeline.h"
#include "app/model/td_registry.h"
#include "app/train/td_trainer.h"
#include "parallel/td_grid.h"
#include "parallel/td_mpi.h"
#include "td_log.h"

static void human_bytes(double b, char *buf, size_t cap) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024.0 && i < 4) b /= 1024.0, ++i;
  snprintf(buf, cap, i ? "%.2f %s" : "%.0f %s", b, u[i]);
}

static void human_count(double x, char *buf, size_t cap) {
  if (x >= 1e12) snprintf(buf, cap, "%.2fT", x / 1e12);
  else if (x >= 1e9) snprintf(buf, cap, "%.2fG", x / 1e9);
  else if (x >= 1e6) snprintf(buf, cap, "%.2fM", x / 1e6);
  else if (x >= 1e3) snprintf(buf, cap, "%.2fK", x / 1e3);
  else snprintf(buf, cap, "%.0f", x);
}

/* One rank's line of the grid map, gathered to rank 0. */
typedef struct {
  int rank, dp, cp, tp, pp;
  int gpu, gpus; /* run.device: cuda: the GPU this rank drives (-1: none), of the node's visible */
  char host[64];
  td_mem_plan mem;
  int64_t dev_plain; /* optimizer.offload: the device bytes the same rank allocates without it */
  int tp_size, cp_size, dp_size, pp_size, embed_size;
} rank_info;

static int64_t mem_total(const td_mem_plan *m) {
  return m->param + m->grad + m->optim + m->work + m->act;
}

/* --json: one object with every rank's bytes and the largest of each. */
static void print_json(const rank_info *all, int n) {
  static const char *const keys[] = {"param_bytes", "grad_bytes", "optim_bytes", "work_bytes",
                                     "act_bytes", "total_bytes"};
  int64_t mx[6] = {0}, hmx = 0, cmx = 0;
  printf("{\"ranks\": [");
  for (int i = 0; i < n; ++i) {
    const td_mem_plan *m = &all[i].mem;
    int64_t v[6] = {m->param, m->grad, m->optim, m->work, m->act, mem_total(m)};
    printf("%s\n  {\"rank\": %d, \"dp\": %d, \"cp\": %d, \"tp\": %d, \"pp\": %d, "
           "\"params\": %lld", i ? "," : "", all[i].rank, all[i].dp, all[i].cp, all[i].tp,
           all[i].pp, (long long)m->params_local);
    for (int j = 0; j < 6; ++j) {
      printf(", \"%s\": %lld", keys[j], (long long)v[j]);
      if (v[j] > mx[j]) mx[j] = v[j];
    }
    printf(", \"host_bytes\": %lld, \"startup_bytes\": %lld, \"ckpt_bytes\": %lld}",
           (long long)m->host, (long long)m->startup, (long long)m->ckpt);
    /* optimizer.offload's state; the start-up's host copy; checkpoint staging */
    if (m->host > hmx) hmx = m->host;
    if (m->ckpt > cmx) cmx = m->ckpt;
  }
  printf("],\n \"max\": {");
  for (int j = 0; j < 6; ++j) printf("%s\"%s\": %lld", j ? ", " : "", keys[j], (long long)mx[j]);
  printf(", \"host_bytes\": %lld, \"ckpt_bytes\": %lld}}\n", (long long)hmx, (long long)cmx);
}

/* Groups of kind ('t', 'c', 'd', 'p') that lie inside node n, of all such
 * groups: each group counted at its first member (coordinate 0 of its
 * dimension). */
static void groups_inside(const td_grid *g, char kind, int n, int *inside, int *total) {
  *inside = *total = 0;
  for (int r = 0; r < g->size; ++r) {
    int tc = g->tp * g->cp;
    int c = kind == 't' ? r % g->tp : kind == 'c' ? (r / g->tp) % g->cp
            : kind == 'd' ? (r / tc) % g->dp : r / (tc * g->dp);
    if (c != 0) continue;
    ++*total;
    *inside += g->node_of[r] == n && td_grid_group_nodes(g, kind, r) == 1;
  }
}

/* The rank -> node -> device map, the groups inside each node, and a
 * warning when a tensor-parallel group spans nodes (rank 0). */
static void print_nodes(const td_grid *g, const rank_info *all, int cuda) {
  printf("nodes: %d; rank -> node -> %s:\n", g->nodes, cuda ? "GPU" : "device");
  for (int n = 0; n < g->nodes; ++n) {
    int first = -1, count = 0;
    for (int r = 0; r < g->size; ++r)
      if (g->node_of[r] == n) {
        if (first < 0) first = r;
        ++count;
      }
    printf("  node %d %-16.16s %d rank%s:", n, all[first].host, count, count == 1 ? "" : "s");
    for (int r = 0; r < g->size; ++r) {
      if (g->node_of[r] != n) continue;
      if (cuda && all[r].gpu >= 0) printf(" %d->gpu%d", r, all[r].gpu);
      else printf(" %d->%s", r, cuda ? "none" : "cpu");
    }
    int ti, tt, ci, ct, di, dt, pi, pt;
    groups_inside(g, 't', n, &ti, &tt);
    groups_inside(g, 'c', n, &ci, &ct);
    groups_inside(g, 'd', n, &di, &dt);
    groups_inside(g, 'p', n, &pi, &pt);
    printf("; groups inside: tp %d of %d,", ti, tt);
    if (g->cp > 1) printf(" cp %d of %d,", ci, ct);
    printf(" dp %d of %d, pp %d of %d\n", di, dt, pi, pt);
  }
  int span = 0, example = -1;
  for (int r = 0; r < g->size; ++r)
    if (r % g->tp == 0 && td_grid_group_nodes(g, 't', r) > 1) {
      ++span;
      if (example < 0) example = r;
    }
  if (span > 0)
    td_warn("%d of %d tensor-parallel groups span nodes (the one of ranks %d..%d over %d nodes, "
            "first on %s): every layer's tp all-reduces, forward and backward, then cross the "
            "inter-node network instead of the node's shared memory; give each node a multiple "
            "of tp = %d consecutive ranks (block distribution, --ntasks-per-node a multiple of "
            "tp) so that tp stays inside a node",
            span, g->size / g->tp, example, example + g->tp - 1,
            td_grid_group_nodes(g, 't', example), all[example].host, g->tp);
}

/* What training would allocate on this rank of g: the model's and the ZeRO
 * engine's own size queries, not a second formula; with optimizer.offload,
 * also the device bytes of the same rank without it (what moves). */
static td_status plan_rank(const td_config *cfg, const td_grid *g, td_dcomm_kind dcomm,
                           rank_info *x) {
  TD_CHECK(td_trainer_plan(cfg, g, dcomm, &x->mem));
  if (strcmp(cfg->optimizer_offload, "cpu") == 0) {
    td_config plain = *cfg;
    td_mem_plan pm;
    snprintf(plain.optimizer_offload, sizeof plain.optimizer_offload, "none");
    TD_CHECK(td_trainer_plan(&plain, g, dcomm, &pm));
    x->dev_plain = mem_total(&pm);
  }
  return TD_OK;
}

/* The report (rank 0): the resolved deck, the grid map of the n ranks in
 * all[], nodes, model, memory, pipeline, FLOPs. virt: NULL, or what the
 * virtual grid is (check on fewer ranks than the deck needs). */
static td_status report(const td_config *cfg, const td_grid *g, const rank_info *all, int n,
                        const td_registry *reg, td_dcomm_kind dcomm, const char *why, int json,
                        const char *virt) {
  if (json) {
    print_json(all, n);
    return TD_OK;
  }
  printf("# resolved deck (%s)\n", cfg->deck_path);
  td_config_print(cfg, stdout);
  char a[32], b[32], c[32], d[32], w[32], f[32], h[32], t[32];
  int64_t cp = cfg->parallel_cp;
  if (virt) printf("\n# virtual grid: %s\n", virt);
  int offload = strcmp(cfg->optimizer_offload, "cpu") == 0;
  if (cp > 1)
    printf("\n# grid: dp %lld × cp %lld × tp %lld × pp %lld = %d ranks (rank = tp + tp·(cp + "
           "cp·(dp + dp·pp)))\n", (long long)cfg->parallel_dp, (long long)cp,
           (long long)cfg->parallel_tp, (long long)cfg->parallel_pp, n);
  else
    printf("\n# grid: dp %lld × tp %lld × pp %lld = %d ranks (rank = tp + tp·(dp + dp·pp))\n",
           (long long)cfg->parallel_dp, (long long)cfg->parallel_tp, (long long)cfg->parallel_pp,
           n);
  if (cfg->parallel_sequence_parallel)
    printf("sequence parallel: each tp rank holds 1/tp of its tokens of the residual stream and "
           "norms\n");
  if (cp > 1)
    printf("context parallel: each cp rank holds %lld of every sequence's %lld tokens, chunks i "
           "and %lld − i of %lld; keys and values all-gathered over cp for attention (forward "
           "and again in backward), their gradients reduce-scattered; gradients summed over "
           "dp × cp = %lld ranks\n", (long long)(cfg->model_seq_len / cp),
           (long long)cfg->model_seq_len, (long long)(2 * cp - 1), (long long)(2 * cp),
           (long long)(cfg->parallel_dp * cp));
  int cuda = strcmp(cfg->run_device, "cuda") == 0;
  printf("%5s %4s", "rank", "dp");
  if (cp > 1) printf(" %4s", "cp");
  printf(" %4s %4s  %-16s%s %10s %10s %10s %10s %10s %10s %10s\n", "tp", "pp", "host",
         cuda ? "  gpu" : "", "params", "param mem", "grad mem", "optim mem", "work mem",
         "activ mem", "total");
  int64_t worst = 0;
  for (int i = 0; i < n; ++i) {
    const rank_info *x = &all[i];
    int64_t tot = mem_total(&x->mem);
    if (tot > worst) worst = tot;
    human_count((double)x->mem.params_local, a, sizeof a);
    human_bytes((double)x->mem.param, b, sizeof b);
    human_bytes((double)x->mem.grad, c, sizeof c);
    human_bytes((double)x->mem.optim, d, sizeof d);
    human_bytes((double)x->mem.work, w, sizeof w);
    human_bytes((double)x->mem.act, f, sizeof f);
    human_bytes((double)tot, h, sizeof h);
    char gpu[16] = "";
    if (cuda && x->gpu >= 0) snprintf(gpu, sizeof gpu, " %4d", x->gpu);
    else if (cuda) snprintf(gpu, sizeof gpu, " %4s", "none");
    printf("%5d %4d", x->rank, x->dp);
    if (cp > 1) printf(" %4d", x->cp);
    printf(" %4d %4d  %-16.16s%s %10s %10s %10s %10s %10s %10s %10s\n", x->tp, x->pp, x->host,
           gpu, a, b, c, d, w, f, h);
  }
  if (cuda && all[0].gpus == 0)
    printf("gpu: none visible where check ran (each rank drives GPU local rank mod the node's "
           "GPUs; without one, training stops with a CUDA error)\n");
  else if (cuda)
    printf("gpu: each rank drives GPU (local rank mod %d) of its node; collectives %s%s%s\n",
           all[0].gpus,
           dcomm == TD_DCOMM_NCCL ? "through NCCL (dp, tp, tied embedding; pipeline messages "
                                    "on one NCCL channel per direction of each link)"
                                  : "in MPI on host copies",
           dcomm == TD_DCOMM_OFF && why[0] ? ": " : "", dcomm == TD_DCOMM_OFF ? why : "");
  printf("communicators: tp %d,", all[0].tp_size);
  if (cp > 1) printf(" cp %d, dp × cp %d,", all[0].cp_size, all[0].cp_size * all[0].dp_size);
  printf(" dp %d, pp %d ranks each; embedding group %d (first/last stage)\n", all[0].dp_size,
         all[0].pp_size, all[0].embed_size);
  print_nodes(g, all, cuda);
  td_model_dims dm;
  td_config_dims(cfg, &dm);
  printf("\n# model: %s, %lld layers, dim %lld, %lld heads", cfg->model_arch,
         (long long)dm.L, (long long)dm.C, (long long)dm.H);
  if (dm.llama)
    printf(" (%lld key/value), SwiGLU %lld, RoPE theta %g", (long long)dm.KV, (long long)dm.F,
           cfg->model_rope_theta);
  printf(", vocab %lld, seq_len %lld, %s head\n", (long long)dm.V, (long long)dm.T,
         dm.tied ? "tied" : "untied");
  human_count((double)reg->total_global, a, sizeof a);
  printf("parameters: %lld (%s)\n", (long long)reg->total_global, a);
  if (dm.E > 0) { /* model.moe: what a token uses, which FLOPs and MFU count */
    char act[32];
    human_count((double)dm.active_params, act, sizeof act);
    char drop[96] = "dropless";
    if (dm.cap > 0)
      snprintf(drop, sizeof drop, "capacity factor %g (an expert keeps %lld slots a sequence)",
               cfg->model_moe_capacity_factor, (long long)dm.cap);
    printf("mixture of experts: %lld of %lld blocks sparse (every %lld), each %lld %s experts "
           "of width %lld, top %lld, a router (%lld, %lld) replicated over tp; %s; "
           "load-balancing loss %g, z-loss %g; active parameters %lld (%s) a token, of %lld "
           "(%s)\n", (long long)dm.moe_layers, (long long)dm.L, (long long)dm.every,
           (long long)dm.E, dm.llama ? "SwiGLU" : "GELU", (long long)dm.Fe, (long long)dm.K,
           (long long)dm.E, (long long)dm.C, drop,
           cfg->model_moe_aux_loss, cfg->model_moe_z_loss, (long long)dm.active_params, act,
           (long long)reg->total_global, a);
  }
  if (cfg->parallel_ep > 1) { /* parallel.ep: the planner's bytes (td_plan_comm_bytes) */
    int64_t ep = cfg->parallel_ep, pb = cfg->parallel_dp * cp, B = td_config_micro_batch(cfg);
    int64_t El = dm.E / ep, kk = dm.K < El ? dm.K : El, N = B * (dm.T / cp);
    td_plan_comm pc;
    double a2a = 0;
    if (td_plan_comm_bytes(cfg, 0, &pc) == TD_OK) a2a = pc.bytes[TD_GROUP_DP][TD_COLL_SENDRECV];
    else td_error_clear();
    char ab[32];
    human_bytes(a2a, ab, sizeof ab);
    printf("expert parallel: ep %lld of the dp × cp %lld ranks hold different experts, %lld "
           "each (their parameters, gradients and AdamW state sharded over the %lld ranks "
           "holding the same ones); each sparse block sends a micro-batch's slots to their "
           "experts' ranks and back all-to-all, %s a step leaving a first-stage rank under "
           "balanced routing; a rank's experts receive up to %lld rows (dropless: ep·N·min(top_k, "
           "E/ep)), the activations above sized for them\n", (long long)ep, (long long)pb,
           (long long)El, (long long)(pb / ep), ab, (long long)(ep * N * kk));
  }
  printf("batch: global %lld sequences = %lld tokens; micro-batch %lld per rank, %lld "
         "accumulation step%s per optimizer step\n",
         (long long)cfg->training_global_batch,
         (long long)(cfg->training_global_batch * cfg->model_seq_len),
         (long long)td_config_micro_batch(cfg), (long long)td_config_accum_steps(cfg),
         td_config_accum_steps(cfg) == 1 ? "" : "s");
  human_bytes((double)worst, h, sizeof h);
  int zero = (int)cfg->parallel_zero;
  int bf16 = strcmp(cfg->training_precision, "bf16") == 0;
  if (bf16)
    printf("precision: bf16: fp32 master parameters, gradients and AdamW moments; a bf16 working "
           "copy of the parameters made after each optimizer step%s; matmuls on bf16 operands "
           "with fp32 accumulation, their inputs (%s, attention and %s outputs) "
           "saved for backward in bf16; residual stream, softmax, statistics and loss in fp32\n",
           zero == 3 ? " (ZeRO-3 gathers it: half the bytes)" : "",
           dm.llama ? "RMSNorm" : "LayerNorm", dm.llama ? "SwiGLU" : "GELU");
  printf("memory: ZeRO stage %d; the largest rank allocates %s: fp32 parameters%s%s, gradients%s, "
         "AdamW moments%s, working buffers%s, activations of %lld live %smicro-batch%s (the "
         "sizes training allocates, from the same code; host-side buffers not included)\n",
         zero, h, zero >= 3 ? " (sharded)" : "", bf16 ? " + bf16 working copy" : "", zero >= 2 ? " (sharded)" : zero == 1 ? " (+ shard)" : "",
         zero >= 1 ? " (sharded)" : "",
         zero == 3 ? " (gathered units, unit gradients, reduce-scatter shares)"
         : zero == 2 ? " (unit gradients, reduce-scatter shares)" : " (none)",
         (long long)all[0].mem.live_micro, cfg->parallel_virtual_stages > 1 ? "chunk " : "",
         all[0].mem.live_micro == 1 ? "" : "es");
  int64_t start_max = 0;
  for (int i = 0; i < n; ++i)
    if (all[i].mem.startup > start_max) start_max = all[i].mem.startup;
  human_bytes((double)start_max, h, sizeof h);
  printf("start-up: while the parameters are set, a host copy of them (%s on the largest rank, "
         "4 bytes a local parameter) exists beside these buffers; freed before the first step\n",
         h);
  int64_t ck_max = 0;
  for (int i = 0; i < n; ++i)
    if (all[i].mem.ckpt > ck_max) ck_max = all[i].mem.ckpt;
  human_bytes((double)ck_max, h, sizeof h);
  if (cfg->checkpoint_async)
    printf("checkpoint: asynchronous (checkpoint.async): a host staging buffer of %s on the "
           "largest rank (fp32 parameters and both moments of its shard, 12 bytes an owned "
           "parameter%s), allocated when training starts; a thread per rank writes the file "
           "while training goes on\n", h, cuda ? ", pinned" : "");
  else if (ck_max > 0)
    printf("checkpoint: saves stage through a host buffer of %s on the largest rank (4 bytes an "
           "owned parameter); training waits for each save\n", h);
  else
    printf("checkpoint: saves write from the state itself, training waits for each "
           "(checkpoint.async: true would stage it in 12 bytes of host memory an owned "
           "parameter and write in the background)\n");
  if (offload) {
    /* the rank whose device memory is largest: its host state and what moved */
    const rank_info *x = &all[0];
    for (int i = 1; i < n; ++i)
      if (mem_total(&all[i].mem) > mem_total(&x->mem)) x = &all[i];
    int64_t dev = mem_total(&x->mem), moved = x->dev_plain - dev;
    int64_t dpcp = cfg->parallel_dp * cp; /* ZeRO shards over dp × cp */
    int64_t owned = zero == 0 ? x->mem.params_local : (x->mem.params_local + dpcp - 1) / dpcp;
    char hb[32], db[32], pb[32], mb[32];
    human_bytes((double)x->mem.host, hb, sizeof hb);
    human_bytes((double)dev, db, sizeof db);
    human_bytes((double)x->dev_plain, pb, sizeof pb);
    human_bytes((double)moved, mb, sizeof mb);
    printf("offload: optimizer.offload = cpu: device %s (without offload %s: %s, %.1f bytes per "
           "owned parameter, moved off the device); host %s pinned for the optimizer (fp32 "
           "masters, AdamW moments, a copy of the owned gradients%s: %.1f bytes per owned "
           "parameter); AdamW runs on the CPU, each step copies the owned gradients to the host "
           "and the updated %s parameters back\n",
           db, pb, mb, owned > 0 ? (double)moved / (double)owned : 0.0, hb,
           bf16 ? ", their bf16 upload buffer" : "",
           owned > 0 ? (double)x->mem.host / (double)owned : 0.0, bf16 ? "bf16" : "fp32");
  }
  if (strcmp(cfg->model_attention, "fused") == 0)
    printf("attention: fused (FlashAttention-2): each layer keeps its output and one log-sum-exp "
           "per query row (B·heads·T floats), the backward recomputes the probabilities tile by "
           "tile%s\n",
           strcmp(cfg->training_recompute, "attention") == 0
               ? "; training.recompute: attention has nothing left to drop and runs as none"
               : "");
  else
    printf("attention: materialized: each layer keeps its (B, heads, T, T) probabilities%s\n",
           strcmp(cfg->training_recompute, "attention") == 0
               ? " only while its backward runs (training.recompute: attention)"
               : "");
  {
    const td_param *wte = td_registry_find(reg, TD_PK_WTE, -1);
    int64_t Vs = wte->local_shape[0], N = td_config_micro_batch(cfg) * dm.T / cfg->parallel_cp;
    int64_t R = cfg->model_head_chunk < N ? cfg->model_head_chunk : N;
    char lb[32], fb[32];
    human_bytes(4.0 * (double)N * (double)Vs, lb, sizeof lb);
    human_bytes(4.0 * (double)R * (double)Vs, fb, sizeof fb);
    if (strcmp(cfg->model_head, "fused") == 0)
      printf("head: fused: logits, loss and gradient in chunks of %lld rows — (%lld, %lld) float32 "
             "logits at once, %s, where materialized keeps (%lld, %lld) = %s per micro-batch in "
             "flight; the backward computes each chunk's logits again (one more head matmul)\n",
             (long long)R, (long long)R, (long long)Vs, fb, (long long)N, (long long)Vs, lb);
    else
      printf("head: materialized: each micro-batch in flight keeps its (%lld, %lld) float32 "
             "logits, %s (model.head: fused keeps %s)\n",
             (long long)N, (long long)Vs, lb, fb);
  }
  if (cfg->parallel_pp > 1) {
    td_sched_sim sim;
    TD_CHECK(td_pipe_predict(cfg, &sim));
    printf("pipeline: %s schedule over %lld stages", cfg->parallel_pp_schedule,
           (long long)cfg->parallel_pp);
    if (cfg->parallel_virtual_stages > 1)
      printf(" of %lld model chunks each", (long long)cfg->parallel_virtual_stages);
    printf(", %lld micro-batches; predicted bubble %.4f (idle over compute time, the slowest "
           "stage; %.1f%% of the step idle), simulated with F = B = W per layer%s and free "
           "messages\n", (long long)td_config_accum_steps(cfg), sim.bubble, 100.0 * sim.idle_frac,
           strcmp(cfg->parallel_pp_schedule, "zb-h1") == 0 ? "" : " (a backward is B + W)");
  }
  double fpt = td_flops_per_token(cfg);
  human_count(fpt, t, sizeof t);
  human_count(fpt * (double)cfg->training_global_batch * (double)cfg->model_seq_len, a, sizeof a);
  printf("FLOPs: %s per token (6·N + 12·L·C·T, training), %s per optimizer step\n", t, a);
  return TD_OK;
}


static td_status check_main(td_app *app, const td_config *cfg, int json) {
  td_status st = TD_OK;
  td_grid *g = NULL;
  td_registry *reg = NULL;
  rank_info *all = NULL;
  TD_CHECK_GOTO(td_grid_create(app->world, (int)cfg->parallel_dp, (int)cfg->parallel_cp,
                               (int)cfg->parallel_tp, (int)cfg->parallel_pp, &g));
  TD_CHECK_GOTO(td_grid_set_ep(g, (int)cfg->parallel_ep));
  /* Test-only: TD_TEST_FAIL_RANK=r makes rank r fail alone, here, while every
   * other rank waits in a collective: the job must end, not hang. */
  TD_CHECK_GOTO(td_test_fail_point("check"));

  /* what this build cannot compute is refused here, not in the middle of a run */
  char why[256];
  if (!td_kernels_precision_ok(cfg->run_device, cfg->training_precision, why, sizeof why))
    st = td_error_set(TD_ERR_DECK, __FILE__, __LINE__, __func__, "%s: training.precision: %s",
                      cfg->deck_path, why);
  TD_CHECK_GOTO(td_agree(app->world, st));
  st = td_registry_create(cfg, g->tp, g->tp_rank, g->pp, g->pp_rank, &reg);
  rank_info me;
  memset(&me, 0, sizeof me);
  /* what training would allocate here: the model's and the ZeRO engine's own
   * size queries, not a second formula */
  int local_rank = 0, local_size = 1;
  td_dcomm_kind dcomm = TD_DCOMM_OFF;
  TD_CHECK_GOTO(td_trainer_node_place(app, &local_rank, &local_size));
  TD_CHECK_GOTO(td_trainer_dcomm_kind(app, cfg, local_size, &dcomm, why, sizeof why));
  if (st == TD_OK) st = plan_rank(cfg, g, dcomm, &me);
  TD_CHECK_GOTO(td_agree(app->world, st));
  me.rank = g->rank, me.dp = g->dp_rank, me.cp = g->cp_rank, me.tp = g->tp_rank;
  me.pp = g->pp_rank;
  int len = 0;
  char host[MPI_MAX_PROCESSOR_NAME];
  MPI_Get_processor_name(host, &len);
  snprintf(me.host, sizeof me.host, "%s", host);
  me.gpu = td_trainer_gpu_of(cfg, local_rank, &me.gpus);
  TD_MPI_CHECK(MPI_Comm_size(g->tp_comm, &me.tp_size));
  TD_MPI_CHECK(MPI_Comm_size(g->cp_comm, &me.cp_size));
  TD_MPI_CHECK(MPI_Comm_size(g->dp_comm, &me.dp_size));
  TD_MPI_CHECK(MPI_Comm_size(g->pp_comm, &me.pp_size));
  me.embed_size = 0;
  if (g->embed_comm != MPI_COMM_NULL) TD_MPI_CHECK(MPI_Comm_size(g->embed_comm, &me.embed_size));
  if (app->rank == 0) {
    all = calloc((size_t)app->size, sizeof *all);
    if (!all) st = td_error_set(TD_ERR_NOMEM, __FILE__, __LINE__, __func__, "out of memory");
  }
  TD_CHECK_GOTO(td_agree(app->world, st));
  TD_MPI_CHECK(MPI_Gather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, 0,
                          app->world));
  if (app->rank == 0) st = report(cfg, g, all, app->size, reg, dcomm, why, json, NULL);
  st = td_agree(app->world, st);
done:
  free(all);
  td_registry_destroy(&reg);
  td_grid_destroy(&g);
  return st;
}

/* check on fewer processes than the deck's ranks (a login node, a laptop):
 * rank 0 computes every rank of the deck's grid on a virtual grid — the
 * same size queries (td_trainer_plan) — with rpn ranks per node for the
 * node map (hosts node0, node1, ...; GPU = local rank). */
static td_status check_virtual(td_app *app, const td_config *cfg, int json, int rpn) {
  td_status st = TD_OK;
  int dp = (int)cfg->parallel_dp, cp = (int)cfg->parallel_cp, tp = (int)cfg->parallel_tp,
      pp = (int)cfg->parallel_pp, n = dp * cp * tp * pp;
  char why[256] = "";
  if (!td_kernels_precision_ok(cfg->run_device, cfg->training_precision, why, sizeof why))
    st = td_error_set(TD_ERR_DECK, __FILE__, __LINE__, __func__, "%s: training.precision: %s",
                      cfg->deck_path, why);
  TD_CHECK(td_agree(app->world, st));
  /* the collectives a GPU job of this build would use (as trident plan assumes) */
  int cuda = strcmp(cfg->run_device, "cuda") == 0;
  td_dcomm_kind dcomm = cuda ? TD_DCOMM_NCCL : TD_DCOMM_OFF;
  why[0] = '\0';
  if (app->rank != 0) return td_agree(app->world, TD_OK);
  rank_info *all = calloc((size_t)n, sizeof *all);
  int *node_of = calloc((size_t)n, sizeof *node_of);
  td_registry *reg = NULL;
  if (!all || !node_of) st = td_error_set(TD_ERR_NOMEM, __FILE__, __LINE__, __func__, "out of memory");
  for (int r = 0; st == TD_OK && r < n; ++r) {
    rank_info *x = &all[r];
    x->rank = r, x->tp = r % tp, x->cp = (r / tp) % cp, x->dp = (r / (tp * cp)) % dp;
    x->pp = r / (tp * cp * dp);
    td_grid vg;
    td_grid_virtual(dp, cp, tp, pp, x->dp, x->cp, x->tp, x->pp, &vg);
    (void)td_grid_set_ep(&vg, (int)cfg->parallel_ep); /* the deck's checks: ep divides dp·cp */
    st = plan_rank(cfg, &vg, dcomm, x);
    node_of[r] = r / rpn;
    snprintf(x->host, sizeof x->host, "node%d", r / rpn);
    x->gpu = cuda ? r % rpn : -1, x->gpus = cuda ? rpn : 0;
    x->tp_size = tp, x->cp_size = cp, x->dp_size = dp, x->pp_size = pp;
    x->embed_size = pp > 1 ? 2 : 1;
  }
  if (st == TD_OK) st = td_registry_create(cfg, tp, 0, pp, 0, &reg);
  if (st == TD_OK) {
    td_grid g;
    td_grid_virtual(dp, cp, tp, pp, 0, 0, 0, 0, &g);
    g.size = n, g.node_of = node_of, g.nodes = (n + rpn - 1) / rpn;
    char virt[512];
    snprintf(virt, sizeof virt, "this job has %d process%s, the deck %d ranks: each rank below "
             "is computed as on the deck's grid (the same size queries as training), placed "
             "%d rank%s per node (--ranks-per-node N) on %d nodes named node0, node1, ...",
             app->size, app->size == 1 ? "" : "es", n, rpn, rpn == 1 ? "" : "s", g.nodes);
    st = report(cfg, &g, all, n, reg, dcomm, why, json, virt);
  }
  td_registry_destroy(&reg);
  free(node_of);
  free(all);
  return td_agree(app->world, st);
}

td_status td_cmd_check(td_app *app, int argc, char **argv) {
  td_deck_args a;
  td_status st = td_app_deck_args("check", argc, argv, &a);
  int schema = 0, ranks = 0, json = 0, rpn = 0;
  for (int i = 0; st == TD_OK && i < a.nrest; ++i) {
    if (strcmp(a.rest[i], "--schema") == 0)
      schema = 1;
    else if (strcmp(a.rest[i], "--json") == 0)
      json = 1;
    else if (strcmp(a.rest[i], "--ranks") == 0)
      ranks = 1;
    else if (strcmp(a.rest[i], "--ranks-per-node") == 0 && i + 1 < a.nrest) {
      char *end = NULL;
      rpn = (int)strtol(a.rest[++i], &end, 10);
      if (*end || rpn < 1 || rpn > 65536)
        st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                          "trident check: --ranks-per-node %s: expected a count >= 1", a.rest[i]);
    } else
      st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                        "trident check: unknown option '%s' (see trident check --help)", a.rest[i]);
  }
  if (st == TD_OK && !schema && !a.deck)
    st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                      "trident check: missing DECK (usage: trident check DECK [--set k.k=v]...)");
  TD_CHECK(td_agree(app->world, st));
  if (schema) {
    if (app->rank == 0) td_config_print_schema(stdout);
    return TD_OK;
  }
  td_config cfg;
  if (ranks) {
    /* Print the rank count the deck asks for (dp·cp·tp·pp), for launch scripts. */
    if (app->rank == 0) st = td_config_load(a.deck, a.nset, a.sets, 0, &cfg);
    TD_CHECK(td_agree(app->world, st));
    if (app->rank == 0)
      printf("%lld\n", (long long)(cfg.parallel_dp * cfg.parallel_cp * cfg.parallel_tp *
                                   cfg.parallel_pp));
    return TD_OK;
  }
  /* the deck's rank count: more than the one process this job has -> a
   * virtual grid (several processes must be the deck's count, as in train) */
  int64_t need = 0;
  if (app->rank == 0) st = td_config_load(a.deck, a.nset, a.sets, 0, &cfg);
  if (st == TD_OK)
    need = cfg.parallel_dp * cfg.parallel_cp * cfg.parallel_tp * cfg.parallel_pp;
  TD_CHECK(td_agree(app->world, st));
  TD_MPI_CHECK(MPI_Bcast(&need, 1, MPI_INT64_T, 0, app->world));
  if (need > 1 && app->size == 1) { /* one process: a login node, a laptop */
    TD_MPI_CHECK(MPI_Bcast(&cfg, (int)sizeof cfg, MPI_BYTE, 0, app->world));
    if (rpn == 0) rpn = need < 8 ? (int)need : 8;
    TD_CHECK(check_virtual(app, &cfg, json, rpn));
  } else {
    TD_CHECK(td_app_load_config(app, &a, &cfg)); /* the job's size must be the deck's */
    TD_CHECK(check_main(app, &cfg, json));
  }
  /* the files the run will need: after the report, which holds without them */
  TD_CHECK(td_app_check_paths(app, &cfg, 1, 1, 1));
  if (app->rank == 0 && !json) printf("check: OK\n");
  return TD_OK;
}
