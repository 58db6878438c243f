/* cmd_plan.c — `trident plan DECK --cluster FILE [--ranks N] [--top K]
 * [--json] [--emit]`, or `mpiexec -n 2 trident plan --calibrate`: the configurations of N ranks that fit, best first,
 * with predicted memory, step time, MFU, bubble and communication
 * (app/plan/td_plan.h); with --set parallel.* one given configuration. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/cli/td_cli.h"
#include "app/plan/td_plan.h"
#include "parallel/td_mpi.h"
#include "td_log.h"

typedef struct {
  td_plan_result *r;
  int n, cap;
} results;

static td_status push(results *rs, const td_plan_result *r) {
  if (rs->n == rs->cap) {
    int cap = rs->cap ? 2 * rs->cap : 256;
    td_plan_result *x = realloc(rs->r, (size_t)cap * sizeof *x);
    if (!x) TD_FAIL(TD_ERR_NOMEM, "out of memory");
    rs->r = x, rs->cap = cap;
  }
  rs->r[rs->n++] = *r;
  return TD_OK;
}

/* Best first: configurations that fit by step time, then the others by how
 * much they miss. */
static int by_rank(const void *a, const void *b) {
  const td_plan_result *x = a, *y = b;
  if (x->fits != y->fits) return y->fits - x->fits;
  if (!x->fits) return x->over_bytes < y->over_bytes ? -1 : x->over_bytes > y->over_bytes;
  return x->step_s < y->step_s ? -1 : x->step_s > y->step_s;
}

static int has_parallel_set(const td_deck_args *a) {
  for (int i = 0; i < a->nset; ++i)
    if (strncmp(a->sets[i], "parallel.", 9) == 0) return 1;
  return 0;
}

/* The overrides that select configuration c (--emit, and enumeration). */
static void sets_of(const td_config *c, char buf[11][96], char **sets) {
  snprintf(buf[0], 96, "parallel.dp=%lld", (long long)c->parallel_dp);
  snprintf(buf[1], 96, "parallel.cp=%lld", (long long)c->parallel_cp);
  snprintf(buf[2], 96, "parallel.tp=%lld", (long long)c->parallel_tp);
  snprintf(buf[3], 96, "parallel.pp=%lld", (long long)c->parallel_pp);
  snprintf(buf[4], 96, "parallel.zero=%lld", (long long)c->parallel_zero);
  snprintf(buf[5], 96, "parallel.micro_batch=%lld", (long long)c->parallel_micro_batch);
  snprintf(buf[6], 96, "parallel.pp_schedule=%s", c->parallel_pp_schedule);
  snprintf(buf[7], 96, "parallel.virtual_stages=%lld", (long long)c->parallel_virtual_stages);
  snprintf(buf[8], 96, "parallel.sequence_parallel=%s", c->parallel_sequence_parallel ? "true" : "false");
  snprintf(buf[9], 96, "training.recompute=%s", c->training_recompute);
  snprintf(buf[10], 96, "parallel.ep=%lld", (long long)c->parallel_ep);
  for (int i = 0; i < 11; ++i) sets[i] = buf[i];
}

static void print_json(const results *rs, int top) {
  printf("[");
  for (int i = 0; i < rs->n && i < top; ++i) {
    const td_plan_result *r = &rs->r[i];
    const td_config *c = &r->cfg;
    char why[256];
    snprintf(why, sizeof why, "%s", r->refused);
    for (char *q = why; *q; ++q)
      if (*q == '"' || *q == '\\' || (unsigned char)*q < 32) *q = '\'';
    printf("%s\n {\"dp\": %lld, \"cp\": %lld, \"ep\": %lld, \"tp\": %lld, \"pp\": %lld, "
           "\"zero\": %lld, "
           "\"micro_batch\": %lld, \"schedule\": \"%s\", \"virtual_stages\": %lld, "
           "\"sequence_parallel\": %s, \"recompute\": \"%s\", \"fits\": %s, "
           "\"mem_bytes_per_rank\": %lld, \"mem_stage\": %d, \"param_bytes\": %lld, "
           "\"grad_bytes\": %lld, \"optim_bytes\": %lld, \"work_bytes\": %lld, "
           "\"act_bytes\": %lld, \"over_bytes\": %.0f, \"step_s\": %.6g, \"tokens_per_s\": %.6g, "
           "\"tflops_per_device\": %.6g, \"hw_tflops_per_device\": %.6g, \"mfu\": %.6g, "
           "\"bubble\": %.6g, \"matmul_efficiency\": %.4g, \"compute_s\": %.6g, "
           "\"optimizer_s\": %.6g, \"comm_bytes\": %.0f, \"baseline_bytes\": %.0f, "
           "\"startup_bytes\": %.0f, \"ckpt_bytes\": %.0f, \"refused\": \"%s\", \"comm\": {",
           i ? "," : "", (long long)c->parallel_dp, (long long)c->parallel_cp,
           (long long)c->parallel_ep,
           (long long)c->parallel_tp, (long long)c->parallel_pp, (long long)c->parallel_zero,
           (long long)td_config_micro_batch(c), c->parallel_pp_schedule,
           (long long)c->parallel_virtual_stages, c->parallel_sequence_parallel ? "true" : "false",
           c->training_recompute, r->fits ? "true" : "false", (long long)r->mem_total,
           r->mem_stage, (long long)r->mem.param, (long long)r->mem.grad,
           (long long)r->mem.optim, (long long)r->mem.work, (long long)r->mem.act,
           r->over_bytes, r->step_s, r->tokens_per_s, r->tflops, r->hw_tflops, r->mfu, r->bubble,
           r->eff, r->compute_s, r->optim_s, r->comm_bytes, r->baseline, r->startup, r->ckpt, why);
    for (int g = 0; g < TD_GROUP_COUNT; ++g)
      printf("%s\"%s\": {\"s\": %.6g, \"exposed_s\": %.6g}", g ? ", " : "", td_plan_group_name(g),
             r->comm_s[g], r->exposed_s[g]);
    printf("}}");
  }
  printf("\n]\n");
}

static void print_table(const results *rs, int top, const td_cluster *cl, int world,
                        int rejected) {
  const double gib = 1073741824.0;
  printf("# trident plan: %d ranks on %s (%s, %.0f GiB, %d per node); %d configurations "
         "predicted (%d refused by the deck's checks), best first\n", world, cl->name,
         cl->device, cl->mem_bytes / gib, cl->devices_per_node, rs->n, rejected);
  printf("%3s %4s %3s %3s %3s %3s %2s %2s %-9s %3s %2s %-9s | %8s %7s %7s %7s %7s %7s | %9s %10s "
         "%7s %6s %6s | %s\n", "#", "dp", "cp", "ep", "tp", "pp", "z", "sp", "recompute", "mb",
         "v", "schedule", "mem GiB", "param", "grad", "optim", "work", "act", "step s", "tokens/s",
         "TFLOP/s", "MFU", "bubble", "comm s exposed/total (tp dp pp cp)");
  for (int i = 0; i < rs->n && i < top; ++i) {
    const td_plan_result *r = &rs->r[i];
    const td_config *c = &r->cfg;
    char fit[48] = "";
    if (r->refused[0]) snprintf(fit, sizeof fit, " (refused: see --json)");
    else if (!r->fits) snprintf(fit, sizeof fit, " (over by %.2f GiB)", r->over_bytes / gib);
    printf("%3d %4lld %3lld %3lld %3lld %3lld %2lld %2s %-9s %3lld %2lld %-9s | %8.2f %7.2f %7.2f "
           "%7.2f %7.2f %7.2f | %9.4g %10.4g %7.1f %5.1f%% %6.3f | %.3g/%.3g %.3g/%.3g %.3g/%.3g "
           "%.3g/%.3g%s\n", i + 1, (long long)c->parallel_dp, (long long)c->parallel_cp,
           (long long)c->parallel_ep,
           (long long)c->parallel_tp, (long long)c->parallel_pp, (long long)c->parallel_zero,
           c->parallel_sequence_parallel ? "y" : "n", c->training_recompute,
           (long long)td_config_micro_batch(c), (long long)c->parallel_virtual_stages,
           c->parallel_pp_schedule, (double)r->mem_total / gib, (double)r->mem.param / gib,
           (double)r->mem.grad / gib, (double)r->mem.optim / gib, (double)r->mem.work / gib,
           (double)r->mem.act / gib, r->step_s, r->tokens_per_s, r->tflops, 100.0 * r->mfu,
           r->bubble, r->exposed_s[TD_GROUP_TP], r->comm_s[TD_GROUP_TP],
           r->exposed_s[TD_GROUP_DP], r->comm_s[TD_GROUP_DP], r->exposed_s[TD_GROUP_PP],
           r->comm_s[TD_GROUP_PP], r->exposed_s[TD_GROUP_CP], r->comm_s[TD_GROUP_CP], fit);
  }
  printf("memory: the largest rank (first or last stage), as training allocates it "
         "(trident check's size query); TFLOP/s and MFU: model FLOPs (6·N + 12·L·C·T per "
         "token, no recomputation) per device; bubble: the slowest stage's idle time over its "
         "compute time in one step, a fraction (0.105 = idle 10.5%% as long as it computes), "
         "from the schedule simulated with these costs; comm: seconds per step not hidden behind "
         "compute / in all (dp: also the experts' all-to-all over ep, on the critical path)\n");
}

static int divides(int64_t a, int64_t b) { return b > 0 && a % b == 0; }

/* Every (dp, cp, ep, tp, pp, zero, sp, recompute, micro-batch, schedule, v) of
 * `world` ranks the deck checker accepts, pruned: tp within a node and
 * dividing the heads, cp only for sequences of 8,192 tokens or more, micro-
 * batches 1, 2, 4, 8. */
static td_status enumerate(const td_config *base, const char *text, const td_cluster *cl,
                           int world, results *rs, int *rejected) {
  static const char *const rec[3] = {"none", "attention", "blocks"};
  static const char *const sch[4] = {"1f1b", "zb-h1", "interleaved", "gpipe"};
  td_model_dims d;
  td_config_dims(base, &d);
  for (int tp = 1; tp <= world; tp *= 2) {
    if (!divides(world, tp) || tp > cl->devices_per_node || !divides(d.KV, tp)) continue;
    for (int cp = 1; cp * tp <= world; cp *= 2) {
      if (!divides(world / tp, cp) || (cp > 1 && d.T < 8192)) continue;
      for (int pp = 1; pp * cp * tp <= world; ++pp) {
        if (!divides(world / tp / cp, pp) || !divides(d.L, pp)) continue;
        int dp = world / tp / cp / pp;
        if (!divides(base->training_global_batch, dp)) continue;
        /* expert parallelism: powers of two dividing the experts and dp × cp */
        for (int ep = 1; ep <= dp * cp; ep *= 2) {
        if (!divides(dp * cp, ep) || (ep > 1 && !divides(d.E, ep))) continue;
        for (int zero = 0; zero <= 3; ++zero) {
          if (dp * cp == 1 && zero > 0) continue;
          for (int sp = 0; sp <= (tp > 1); ++sp)
            for (int ri = 0; ri < 3; ++ri)
              for (int64_t mb = 1; mb <= 8; mb *= 2) {
                if (!divides(base->training_global_batch / dp, mb)) continue;
                for (int si = 0; si < (pp > 1 ? 4 : 1); ++si) {
                  td_config c = *base;
                  c.parallel_dp = dp, c.parallel_cp = cp, c.parallel_tp = tp, c.parallel_pp = pp;
                  c.parallel_zero = zero, c.parallel_micro_batch = mb, c.parallel_ep = ep;
                  c.parallel_sequence_parallel = sp;
                  snprintf(c.training_recompute, TD_STR_MAX, "%s", rec[ri]);
                  snprintf(c.parallel_pp_schedule, TD_STR_MAX, "%s", sch[si]);
                  c.parallel_virtual_stages = si == 2 ? 2 : 1;
                  char buf[11][96];
                  char *sets[11];
                  sets_of(&c, buf, sets);
                  td_config chk;
                  if (td_config_load_text_sets(base->deck_path, text, 11, sets, world, &chk) !=
                      TD_OK) {
                    td_error_clear();
                    ++*rejected;
                    continue;
                  }
                  /* what the trainer would refuse (a shard over the MPI count
                   * limit) is not a configuration */
                  td_plan_result r;
                  td_status e = td_plan_eval(&chk, cl, &r);
                  if (e == TD_ERR_NOMEM) return e;
                  if (e != TD_OK || r.refused[0]) {
                    td_error_clear();
                    ++*rejected;
                    continue;
                  }
                  TD_CHECK(push(rs, &r));
                }
              }
        }
        }
      }
    }
  }
  return TD_OK;
}

#define MAX_CSETS 16

static td_status plan_main(const td_deck_args *a, const char *cluster, const char **csets,
                           int ncsets, int ranks, int top, int json, int emit) {
  td_status st = TD_OK;
  td_cluster cl;
  td_config base;
  char *text = NULL;
  results rs = {0};
  int rejected = 0;
  TD_CHECK(td_cluster_load(cluster, &cl));
  for (int i = 0; i < ncsets; ++i) TD_CHECK(td_cluster_set(&cl, csets[i]));
  int one = has_parallel_set(a);
  TD_CHECK(td_config_load(a->deck, a->nset, (char **)a->sets, 0, &base));
  int world = ranks > 0 ? ranks
              : one ? (int)(base.parallel_dp * base.parallel_cp * base.parallel_tp * base.parallel_pp)
                    : cl.nodes * cl.devices_per_node;
  double t0 = td_now();
  if (one) {
    td_config c;
    TD_CHECK(td_config_load(a->deck, a->nset, (char **)a->sets, world, &c));
    td_plan_result r;
    TD_CHECK(td_plan_eval(&c, &cl, &r));
    TD_CHECK_GOTO(push(&rs, &r));
  } else {
    TD_CHECK(td_config_to_text(&base, 0, &text));
    TD_CHECK_GOTO(enumerate(&base, text, &cl, world, &rs, &rejected));
    if (rs.n == 0)
      TD_FAIL_GOTO(TD_ERR_USAGE, "trident plan: no configuration of %s on %d ranks passes the "
                   "deck's checks (try another --ranks)", a->deck, world);
  }
  qsort(rs.r, (size_t)rs.n, sizeof *rs.r, by_rank);
  if (emit) {
    char buf[11][96];
    char *sets[11];
    sets_of(&rs.r[0].cfg, buf, sets);
    int nset = rs.r[0].cfg.model_moe_experts > 0 ? 11 : 10; /* parallel.ep: with experts */
    for (int i = 0; i < nset; ++i) printf("%s--set %s", i ? " " : "", sets[i]);
    printf("\n");
  } else if (json) {
    print_json(&rs, top);
  } else {
    print_table(&rs, top, &cl, world, rejected);
    printf("planned in %.2f s\n", td_now() - t0);
  }
done:
  free(rs.r);
  free(text);
  return st;
}

td_status td_cmd_plan(td_app *app, int argc, char **argv) {
  td_deck_args a;
  td_status st = td_app_deck_args("plan", argc, argv, &a);
  const char *cluster = NULL, *csets[MAX_CSETS];
  int ncsets = 0;
  int ranks = 0, top = 10, json = 0, emit = 0, calibrate = 0, gpu = 0;
  for (int i = 0; st == TD_OK && i < a.nrest; ++i) {
    const char *o = a.rest[i];
    if (strcmp(o, "--cluster") == 0 && i + 1 < a.nrest) cluster = a.rest[++i];
    else if (strcmp(o, "--cluster-set") == 0 && i + 1 < a.nrest) {
      if (ncsets == MAX_CSETS)
        st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                          "trident plan: at most %d --cluster-set", MAX_CSETS);
      else
        csets[ncsets++] = a.rest[++i];
    }
    else if ((strcmp(o, "--ranks") == 0 || strcmp(o, "--top") == 0) && i + 1 < a.nrest) {
      const char *v = a.rest[++i];
      char *end = NULL;
      long n = strtol(v, &end, 10);
      if (end == v || *end || n < 1 || n > (1L << 24))
        st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                          "trident plan: %s %s: expected a whole number from 1 to 16777216", o, v);
      else if (o[2] == 'r')
        ranks = (int)n;
      else
        top = (int)n;
    }
    else if (strcmp(o, "--json") == 0) json = 1;
    else if (strcmp(o, "--emit") == 0) emit = 1;
    else if (strcmp(o, "--calibrate") == 0) calibrate = 1;
    else if (strcmp(o, "--device") == 0 && i + 1 < a.nrest) {
      const char *v = a.rest[++i];
      if (strcmp(v, "cuda") == 0) gpu = 1;
      else if (strcmp(v, "cpu") != 0)
        st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                          "trident plan --calibrate --device %s: expected cpu or cuda", v);
    }
    else
      st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                        "trident plan: unknown option '%s' (see trident plan --help)", o);
  }
  if (calibrate) {
    /* every rank measures; rank 0 prints the cluster file */
    td_cluster cl;
    td_calibration cal;
    td_gpu_calibration gcal;
    if (st == TD_OK && gpu) st = td_plan_calibrate_gpu(app->world, &cl, &gcal);
    else if (st == TD_OK) st = td_plan_calibrate(app->world, &cl, &cal);
    TD_CHECK(td_agree(app->world, st));
    if (app->rank == 0) {
      if (gpu) td_gpu_calibration_print(&gcal, &cl, stdout);
      else td_calibration_print(&cal, stdout);
      td_cluster_print(&cl, stdout);
      fflush(stdout);
    }
    return TD_OK;
  }
  if (st == TD_OK && (!a.deck || !cluster))
    st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                      "trident plan: usage: trident plan DECK --cluster FILE [--ranks N] "
                      "[--top K] [--json] [--emit] [--set k.k=v]... [--cluster-set k.k=v]... | mpiexec -n 2 trident "
                      "plan --calibrate [--device cuda] > cluster.yaml");
  if (st == TD_OK && (ranks < 0 || top < 1))
    st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                      "trident plan: --ranks and --top take positive numbers");
  TD_CHECK(td_agree(app->world, st));
  /* the planner runs on rank 0 and communicates nothing */
  if (app->rank == 0) st = plan_main(&a, cluster, csets, ncsets, ranks, top, json, emit);
  TD_CHECK(td_agree(app->world, st));
  return TD_OK;
}
