/* check.c — `trident check DECK`: validate, print the resolved deck, the grid,
 * the parameter count, memory per rank and FLOPs, without training. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/td_app.h"
#include "app/td_estimate.h"
#include "app/td_registry.h"
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
  int rank, dp, tp, pp;
  char host[64];
  int64_t params_local, param_bytes, grad_bytes, optim_bytes, gathered_bytes, act_bytes,
      live_micro;
  int tp_size, dp_size, pp_size, embed_size;
} rank_info;

static td_status check_main(td_app *app, const td_config *cfg) {
  td_status st = TD_OK;
  td_grid *g = NULL;
  td_registry *reg = NULL;
  rank_info *all = NULL;
  TD_CHECK_GOTO(td_grid_create(app->world, (int)cfg->parallel_dp, (int)cfg->parallel_tp,
                               (int)cfg->parallel_pp, &g));
  /* Test-only: TD_TEST_FAIL_RANK=r makes rank r fail alone, here, while every
   * other rank waits in a collective: the job must end, not hang. */
  const char *inj = getenv("TD_TEST_FAIL_RANK");
  if (inj && atoi(inj) == app->rank)
    TD_FAIL_GOTO(TD_ERR_INJECTED, "injected failure on rank %d (TD_TEST_FAIL_RANK)", app->rank);

  st = td_registry_create(cfg, g->tp, g->tp_rank, g->pp, g->pp_rank, &reg);
  TD_CHECK_GOTO(td_agree(app->world, st));
  td_estimate e;
  td_estimate_rank(cfg, reg, g->pp_rank, &e);

  rank_info me;
  memset(&me, 0, sizeof me);
  me.rank = g->rank, me.dp = g->dp_rank, me.tp = g->tp_rank, me.pp = g->pp_rank;
  int len = 0;
  char host[MPI_MAX_PROCESSOR_NAME];
  MPI_Get_processor_name(host, &len);
  snprintf(me.host, sizeof me.host, "%s", host);
  me.params_local = e.params_local, me.param_bytes = e.param_bytes;
  me.grad_bytes = e.grad_bytes, me.optim_bytes = e.optim_bytes;
  me.gathered_bytes = e.gathered_bytes, me.act_bytes = e.act_bytes, me.live_micro = e.live_micro;
  MPI_Comm_size(g->tp_comm, &me.tp_size);
  MPI_Comm_size(g->dp_comm, &me.dp_size);
  MPI_Comm_size(g->pp_comm, &me.pp_size);
  me.embed_size = 0;
  if (g->embed_comm != MPI_COMM_NULL) MPI_Comm_size(g->embed_comm, &me.embed_size);
  if (app->rank == 0) {
    all = calloc((size_t)app->size, sizeof *all);
    if (!all) st = td_error_set(TD_ERR_NOMEM, __FILE__, __LINE__, __func__, "out of memory");
  }
  TD_CHECK_GOTO(td_agree(app->world, st));
  TD_MPI_CHECK(MPI_Gather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, 0,
                          app->world));
  if (app->rank != 0) goto done;

  printf("# resolved deck (%s)\n", cfg->deck_path);
  td_config_print(cfg, stdout);
  char a[32], b[32], c[32], d[32], f[32], h[32], t[32];
  printf("\n# grid: dp %lld × tp %lld × pp %lld = %d ranks (rank = tp + tp·(dp + dp·pp))\n",
         (long long)cfg->parallel_dp, (long long)cfg->parallel_tp, (long long)cfg->parallel_pp,
         app->size);
  printf("%5s %4s %4s %4s  %-16s %10s %10s %10s %10s %10s %10s\n", "rank", "dp", "tp", "pp",
         "host", "params", "param mem", "grad mem", "optim mem", "activ mem", "total");
  int64_t worst = 0;
  for (int i = 0; i < app->size; ++i) {
    rank_info *x = &all[i];
    int64_t tot = x->param_bytes + x->grad_bytes + x->optim_bytes + x->gathered_bytes + x->act_bytes;
    if (tot > worst) worst = tot;
    human_count((double)x->params_local, a, sizeof a);
    human_bytes((double)x->param_bytes + (double)x->gathered_bytes, b, sizeof b);
    human_bytes((double)x->grad_bytes, c, sizeof c);
    human_bytes((double)x->optim_bytes, d, sizeof d);
    human_bytes((double)x->act_bytes, f, sizeof f);
    human_bytes((double)tot, h, sizeof h);
    printf("%5d %4d %4d %4d  %-16.16s %10s %10s %10s %10s %10s %10s\n", x->rank, x->dp, x->tp,
           x->pp, x->host, a, b, c, d, f, h);
  }
  printf("communicators: tp %d, dp %d, pp %d ranks each; embedding group %d (first/last stage)\n",
         all[0].tp_size, all[0].dp_size, all[0].pp_size, all[0].embed_size);
  printf("\n# model: %s, %lld layers, dim %lld, %lld heads, vocab %lld, seq_len %lld\n",
         cfg->model_arch, (long long)cfg->model_layers, (long long)cfg->model_dim,
         (long long)cfg->model_heads, (long long)cfg->model_vocab_size,
         (long long)cfg->model_seq_len);
  human_count((double)reg->total_global, a, sizeof a);
  printf("parameters: %lld (%s)\n", (long long)reg->total_global, a);
  printf("batch: global %lld sequences = %lld tokens; micro-batch %lld per rank, %lld "
         "accumulation step%s per optimizer step\n",
         (long long)cfg->training_global_batch,
         (long long)(cfg->training_global_batch * cfg->model_seq_len),
         (long long)td_config_micro_batch(cfg), (long long)td_config_accum_steps(cfg),
         td_config_accum_steps(cfg) == 1 ? "" : "s");
  human_bytes((double)worst, h, sizeof h);
  printf("memory: ZeRO stage %lld; largest rank needs about %s (fp32 parameters, gradients, "
         "AdamW moments%s, activations of %lld live micro-batch%s)\n",
         (long long)cfg->parallel_zero, h, cfg->parallel_zero >= 3 ? ", 2 gathered layers" : "",
         (long long)all[0].live_micro, all[0].live_micro == 1 ? "" : "es");
  human_count(e.flops_per_token, t, sizeof t);
  human_count(e.flops_per_step, a, sizeof a);
  printf("FLOPs: %s per token (6·N + 12·L·C·T, training), %s per optimizer step\n", t, a);
  printf("check: OK\n");
done:
  free(all);
  td_registry_destroy(&reg);
  td_grid_destroy(&g);
  return st;
}

td_status td_cmd_check(td_app *app, int argc, char **argv) {
  td_deck_args a;
  td_status st = td_app_deck_args("check", argc, argv, &a);
  int schema = 0, ranks = 0;
  for (int i = 0; st == TD_OK && i < a.nrest; ++i) {
    if (strcmp(a.rest[i], "--schema") == 0)
      schema = 1;
    else if (strcmp(a.rest[i], "--ranks") == 0)
      ranks = 1;
    else
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
    /* Print the rank count the deck asks for (dp·tp·pp), for launch scripts. */
    if (app->rank == 0) st = td_config_load(a.deck, a.nset, a.sets, 0, &cfg);
    TD_CHECK(td_agree(app->world, st));
    if (app->rank == 0)
      printf("%lld\n", (long long)(cfg.parallel_dp * cfg.parallel_tp * cfg.parallel_pp));
    return TD_OK;
  }
  TD_CHECK(td_app_load_config(app, &a, &cfg));
  TD_CHECK(check_main(app, &cfg));
  return TD_OK;
}
