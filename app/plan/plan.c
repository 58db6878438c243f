/* plan.c — the planner's model of one configuration (td_plan.h): memory from
 * the allocating code, FLOPs from td_flops_per_token, the bubble from the
 * schedule simulator, bytes from td_plan_comm_bytes, times from the cluster
 * file's links and rates. */
#include "app/plan/td_plan.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/model/td_estimate.h"
#include "app/model/td_model.h"
#include "app/train/td_pipeline.h"
#include "app/model/td_registry.h"
#include "io/td_yaml.h"
#include "parallel/td_grid.h"

const char *td_plan_group_name(int group) {
  static const char *const names[TD_GROUP_COUNT] = {"tp", "dp", "pp", "embed", "cp"};
  return group >= 0 && group < TD_GROUP_COUNT ? names[group] : "?";
}

/* ---- cluster files ------------------------------------------------------------ */

/* One key of a cluster file: where it goes, its unit's scale, its range. */
typedef struct {
  const char *key; /* dotted path */
  size_t off;      /* offset of the double (or int) in td_cluster */
  int is_int;
  double scale, lo, hi;
  int required;
  const char *doc;
} ckey;

#define CK(k, f, i, s, lo, hi, r, doc) {k, offsetof(td_cluster, f), i, s, lo, hi, r, doc}
static const ckey k_ckeys[] = {
    CK("nodes", nodes, 1, 1, 1, 1e7, 0, "nodes of the cluster (default 1)"),
    CK("devices_per_node", devices_per_node, 1, 1, 1, 1e4, 1, "devices (ranks) per node"),
    CK("device.memory_gib", mem_bytes, 0, 1073741824.0, 1e-3, 1e6, 1, "memory per device, GiB"),
    CK("device.memory_gbps", mem_bw, 0, 1e9, 1e-3, 1e6, 1, "memory bandwidth per device, GB/s"),
    CK("device.peak_tflops.fp32", peak_fp32, 0, 1e12, 1e-6, 1e6, 1, "fp32 matmul peak, TFLOP/s"),
    CK("device.peak_tflops.bf16", peak_bf16, 0, 1e12, 1e-6, 1e6, 1, "bf16 matmul peak, TFLOP/s"),
    CK("device.matmul_efficiency", eff_large, 0, 1, 1e-4, 1, 2,
       "fraction of peak reached on large matmuls"),
    CK("device.small_matmul_efficiency", eff_small, 0, 1, 1e-4, 1, 2,
       "fraction of peak reached on small matmuls"),
    CK("device.small_matmul_dim", small_dim, 0, 1, 0, 1e9, 2,
       "a matmul is small when its smallest dimension is below this"),
    CK("device.sms", sms, 1, 1, 0, 1e5, 0,
       "streaming multiprocessors: time each product by its shape (docs/plan.md); default 0: "
       "matmul_efficiency"),
    CK("device.gemm_tile.m", tile_m, 0, 1, 1, 1e4, 0, "rows of a gemm kernel's tile, default 256"),
    CK("device.gemm_tile.n", tile_n, 0, 1, 1, 1e4, 0,
       "columns of a gemm kernel's tile, default 128"),
    CK("device.gemm_efficiency", gemm_eff, 0, 1, 1e-4, 1, 3,
       "fraction of peak a full wave of gemm tiles reaches (with device.sms)"),
    CK("device.attention_efficiency", att_eff, 0, 1, 0, 1, 0,
       "fraction of peak the fused attention reaches (with device.sms), default: its products "
       "timed as gemms"),
    CK("device.kernel_us", kernel_s, 0, 1e-6, 0, 1e6, 0,
       "a kernel's launch and tail, µs (with device.sms), default 0"),
    CK("device.attention_tflops", att_rate, 0, 1e12, 0, 1e6, 0,
       "attention kernels' rate (12·A·T FLOPs per token), TFLOP/s; default: the matmul rate"),
    CK("device.fused_attention_tflops", fatt_rate, 0, 1e12, 0, 1e6, 0,
       "the fused attention kernels' rate (18·A·T FLOPs per token, without device.sms), "
       "TFLOP/s; default: attention_tflops"),
    CK("device.elementwise_passes", ew_passes, 0, 1, 0, 100, 0,
       "passes of the non-matmul kernels over a layer's activations in forward (backward "
       "twice), timed at memory_gbps; default 0: folded into matmul_efficiency"),
    CK("device.baseline_mib", baseline, 0, 1048576.0, 0, 1e9, 0,
       "resident MiB a rank holds besides trident's buffers (MPI, libraries), default 0"),
    CK("links.intra.gbps", intra.bw, 0, 1e9, 1e-6, 1e6, 1, "intra-node bandwidth per device, GB/s"),
    CK("links.intra.latency_us", intra.lat, 0, 1e-6, 0, 1e7, 1, "intra-node latency, µs"),
    CK("links.inter.gbps", inter.bw, 0, 1e9, 1e-6, 1e6, 1, "inter-node bandwidth per device, GB/s"),
    CK("links.inter.latency_us", inter.lat, 0, 1e-6, 0, 1e7, 1, "inter-node latency, µs"),
    CK("links.intra.bus_efficiency", intra.bus_eff, 0, 1, 1e-3, 1, 0,
       "fraction of the intra-node bandwidth a collective's ring reaches (NCCL's bus "
       "bandwidth), default 1"),
    CK("links.inter.bus_efficiency", inter.bus_eff, 0, 1, 1e-3, 1, 0,
       "fraction of the inter-node bandwidth a collective's ring reaches, default 1"),
    CK("links.intra.half_mib", intra.half_bytes, 0, 1048576.0, 0, 1e9, 0,
       "message MiB at which an intra-node collective reaches half its bus bandwidth, "
       "default 0"),
    CK("links.inter.half_mib", inter.half_bytes, 0, 1048576.0, 0, 1e9, 0,
       "message MiB at which an inter-node collective reaches half its bus bandwidth, "
       "default 0"),
    CK("links.reduce_scatter", rs_ratio, 0, 1, 1e-3, 1e3, 0,
       "a reduce-scatter's bandwidth over the all-reduce's (the planner's bytes), default 1"),
    CK("links.all_gather", ag_ratio, 0, 1, 1e-3, 1e3, 0,
       "an all-gather's bandwidth over the all-reduce's (the planner's bytes), default 1"),
    CK("links.small_mib", small_bytes, 0, 1048576.0, 0, 1e9, 0,
       "collectives moving at most this many MiB a call (per rank) run at the small rates "
       "below; default 0: one rate for all sizes"),
    CK("links.small_all_reduce", small_ar, 0, 1, 1e-3, 1e3, 0,
       "a small all-reduce's bandwidth over the all-reduce's, default 1"),
    CK("links.small_reduce_scatter", small_rs, 0, 1, 1e-3, 1e3, 0,
       "a small reduce-scatter's bandwidth over the all-reduce's, default 1"),
    CK("links.small_all_gather", small_ag, 0, 1, 1e-3, 1e3, 0,
       "a small all-gather's bandwidth over the all-reduce's, default 1"),
    CK("links.overlap", overlap, 0, 1, 0, 1, 0,
       "fraction of a nonblocking collective hidden behind the rank's compute (default 1)"),
    CK("links.overlap_tp", overlap_tp, 0, 1, 0, 1, 0,
       "fraction of the tensor-parallel collectives the system hides behind its matmuls "
       "(default 0: trident's are blocking)"),
};
#define NCKEYS ((int)(sizeof k_ckeys / sizeof k_ckeys[0]))

static const char *const k_overlap_dp[] = {"trident", "none", "grads", "all"};

/* One leaf: key (dotted) = text v (from `where`, "FILE:LINE:COL" or
 * "--cluster-set"). */
static td_status cluster_leaf(td_cluster *c, const char *key, const char *v, const char *where,
                              int *seen) {
  if (strcmp(key, "name") == 0 || strcmp(key, "device.name") == 0) {
    snprintf(key[0] == 'n' ? c->name : c->device, 128, "%s", v);
    return TD_OK;
  }
  if (strcmp(key, "links.overlap_dp") == 0) {
    for (int i = 0; i < 4; ++i)
      if (strcmp(v, k_overlap_dp[i]) == 0) {
        c->overlap_dp = (td_overlap_dp)i;
        return TD_OK;
      }
    TD_FAIL(TD_ERR_DECK, "%s: links.overlap_dp = '%s': expected trident, none, grads (gradients "
            "reduced during the last backward) or all (and parameters gathered during the next "
            "forward)", where, v);
  }
  int j = 0;
  while (j < NCKEYS && strcmp(k_ckeys[j].key, key) != 0) ++j;
  if (j == NCKEYS)
    TD_FAIL(TD_ERR_DECK, "%s: unknown key '%s' (docs/plan.md lists the keys)", where, key);
  const ckey *e = &k_ckeys[j];
  char *end = NULL;
  double x = strtod(v, &end);
  if (end == v || *end != '\0' || !isfinite(x))
    TD_FAIL(TD_ERR_DECK, "%s: %s: expected a number (%s), found '%s'", where, key, e->doc, v);
  if (x < e->lo || x > e->hi || (e->is_int && x != floor(x)))
    TD_FAIL(TD_ERR_DECK, "%s: %s = %s is out of range: %s%s from %g to %g", where, key, v, e->doc,
            e->is_int ? ", a whole number" : "", e->lo, e->hi);
  if (e->is_int) *(int *)((char *)c + e->off) = (int)x;
  else *(double *)((char *)c + e->off) = x * e->scale;
  if (seen) seen[j] = 1;
  return TD_OK;
}

/* Walk the mapping tree; every scalar leaf must be a known key (or name,
 * device.name, links.overlap_dp). */
static td_status cluster_walk(td_cluster *c, const td_yaml_node *n, const char *prefix, int *seen) {
  if (n->kind != TD_YAML_MAP)
    TD_FAIL(TD_ERR_DECK, "%s:%d:%d: %s: expected a mapping, found %s", c->path, n->line, n->col,
            prefix[0] ? prefix : "cluster file", td_yaml_kind_name(n->kind));
  for (int i = 0; i < n->n; ++i) {
    char key[256], where[TD_STR_MAX + 32];
    snprintf(key, sizeof key, "%s%s%s", prefix, prefix[0] ? "." : "", n->keys[i]->value);
    const td_yaml_node *v = n->items[i];
    if (v->kind == TD_YAML_MAP) {
      TD_CHECK(cluster_walk(c, v, key, seen));
      continue;
    }
    snprintf(where, sizeof where, "%s:%d:%d", c->path, v->kind == TD_YAML_SCALAR ? v->line :
             n->keys[i]->line, v->kind == TD_YAML_SCALAR ? v->col : n->keys[i]->col);
    if (v->kind != TD_YAML_SCALAR)
      TD_FAIL(TD_ERR_DECK, "%s: %s: expected a value, found %s", where, key,
              td_yaml_kind_name(v->kind));
    TD_CHECK(cluster_leaf(c, key, v->value, where, seen));
  }
  return TD_OK;
}

td_status td_cluster_set(td_cluster *c, const char *kv) {
  const char *eq = strchr(kv, '=');
  char key[256];
  if (!eq || eq == kv || (size_t)(eq - kv) >= sizeof key)
    TD_FAIL(TD_ERR_USAGE, "--cluster-set %s: expected KEY=VALUE (a cluster file's key, e.g. "
            "links.overlap_tp=1)", kv);
  memcpy(key, kv, (size_t)(eq - kv));
  key[eq - kv] = '\0';
  char where[300];
  snprintf(where, sizeof where, "--cluster-set %s", kv);
  return cluster_leaf(c, key, eq + 1, where, NULL);
}

td_status td_cluster_load(const char *path, td_cluster *out) {
  td_status st = TD_OK;
  td_yaml_node *root = NULL;
  int seen[NCKEYS];
  memset(seen, 0, sizeof seen);
  memset(out, 0, sizeof *out);
  snprintf(out->path, sizeof out->path, "%s", path);
  out->nodes = 1;
  out->overlap = 1.0, out->rs_ratio = 1.0, out->ag_ratio = 1.0;
  out->small_ar = out->small_rs = out->small_ag = 1.0;
  out->tile_m = 256, out->tile_n = 128;
  out->intra.bus_eff = out->inter.bus_eff = 1.0;
  if (access(path, R_OK) != 0) /* before the YAML reader, which speaks of job decks */
    TD_FAIL_GOTO(TD_ERR_USAGE, "--cluster %s: cannot open the cluster file: %s (see "
                 "inputs/clusters/, or make one: mpiexec -n 2 trident plan --calibrate > "
                 "cluster.yaml)", path, strerror(errno));
  TD_CHECK_GOTO(td_yaml_load(path, NULL, &root));
  TD_CHECK_GOTO(cluster_walk(out, root, "", seen));
  /* required: 1 always, 2 without device.sms (the efficiency model), 3 with it */
  for (int j = 0; j < NCKEYS; ++j) {
    int r = k_ckeys[j].required;
    if ((r == 1 || (r == 2 && out->sms == 0) || (r == 3 && out->sms > 0)) && !seen[j])
      TD_FAIL_GOTO(TD_ERR_DECK, "%s: missing key '%s' (%s)", path, k_ckeys[j].key,
                   k_ckeys[j].doc);
  }
done:
  td_yaml_free(&root);
  return st;
}

void td_cluster_print(const td_cluster *c, FILE *out) {
  fprintf(out, "name: %s\nnodes: %d\ndevices_per_node: %d\ndevice:\n  name: %s\n", c->name,
          c->nodes, c->devices_per_node, c->device);
  fprintf(out, "  memory_gib: %.3f\n  memory_gbps: %.3f\n", c->mem_bytes / 1073741824.0,
          c->mem_bw / 1e9);
  fprintf(out, "  peak_tflops: {fp32: %.4f, bf16: %.4f}\n", c->peak_fp32 / 1e12,
          c->peak_bf16 / 1e12);
  fprintf(out, "  matmul_efficiency: %.3f\n  small_matmul_efficiency: %.3f\n"
          "  small_matmul_dim: %.0f\n", c->eff_large, c->eff_small, c->small_dim);
  if (c->att_rate > 0) fprintf(out, "  attention_tflops: %.4f\n", c->att_rate / 1e12);
  if (c->fatt_rate > 0) fprintf(out, "  fused_attention_tflops: %.4f\n", c->fatt_rate / 1e12);
  if (c->ew_passes > 0) fprintf(out, "  elementwise_passes: %g\n", c->ew_passes);
  if (c->baseline > 0) fprintf(out, "  baseline_mib: %.1f\n", c->baseline / 1048576.0);
  if (c->sms > 0)
    fprintf(out, "  sms: %d\n  gemm_tile: {m: %g, n: %g}\n  gemm_efficiency: %.3f\n"
            "  kernel_us: %.2f\n", c->sms, c->tile_m, c->tile_n, c->gemm_eff, c->kernel_s * 1e6);
  if (c->sms > 0 && c->att_eff > 0) fprintf(out, "  attention_efficiency: %.3f\n", c->att_eff);
  fprintf(out, "links:\n");
  for (int i = 0; i < 2; ++i) {
    const td_link *l = i ? &c->inter : &c->intra;
    fprintf(out, "  %s: {gbps: %.4f, latency_us: %.2f", i ? "inter" : "intra", l->bw / 1e9,
            l->lat * 1e6);
    if (l->bus_eff != 1.0 || l->half_bytes > 0)
      fprintf(out, ", bus_efficiency: %.3f, half_mib: %.3f", l->bus_eff,
              l->half_bytes / 1048576.0);
    fprintf(out, "}\n");
  }
  fprintf(out, "  reduce_scatter: %.3f\n  all_gather: %.3f\n  overlap: %.2f\n", c->rs_ratio,
          c->ag_ratio, c->overlap);
  if (c->small_bytes > 0)
    fprintf(out, "  small_mib: %g\n  small_all_reduce: %.3f\n  small_reduce_scatter: %.3f\n"
            "  small_all_gather: %.3f\n", c->small_bytes / 1048576.0, c->small_ar, c->small_rs,
            c->small_ag);
}

/* ---- bytes per step ---------------------------------------------------------------
 * Each term names the call that moves (and counts) it. Ring volumes per rank,
 * as parallel/coll_mpi.c counts: all-reduce 2(p−1)/p·n, reduce-scatter and
 * all-gather (p−1)·part, a point-to-point message n at each end. */

static double ar(int p, double n, double es) { return p > 1 ? 2.0 * (p - 1) / p * n * es : 0.0; }

static void add(td_plan_comm *o, int g, int kind, double bytes, double calls) {
  if (bytes <= 0) return;
  o->bytes[g][kind] += bytes;
  o->calls[g][kind] += calls;
}

td_status td_plan_comm_bytes(const td_config *c, int stage, td_plan_comm *o) {
  td_status st = TD_OK;
  td_registry *reg = NULL;
  td_schedule *s = NULL;
  memset(o, 0, sizeof *o);
  td_model_dims d;
  td_config_dims(c, &d);
  int dp = (int)c->parallel_dp, cp = (int)c->parallel_cp, tp = (int)c->parallel_tp;
  int pp = (int)c->parallel_pp, zero = (int)c->parallel_zero, pb = dp * cp;
  int bf16 = strcmp(c->training_precision, "bf16") == 0, blocks = c->training_recompute[0] == 'b';
  int64_t B = td_config_micro_batch(c), m = td_config_accum_steps(c);
  double Nf = (double)(B * (d.T / cp)), C = (double)d.C; /* rows of a micro-batch on this rank */
  double rows = (double)td_model_rows(c, B);                /* ... held between layers */
  int ep = (int)c->parallel_ep;
  TD_CHECK_GOTO(td_registry_create_ep(c, tp, 0, pp, stage, ep, 0, &reg));
  TD_CHECK_GOTO(td_pipe_schedule(c, &s));
  int64_t L = 0, Lm = 0; /* layers of this stage, its sparse ones */
  for (int k = 0; k < s->v; ++k) {
    int64_t first, count;
    td_config_chunk_layers(c, td_sched_model_chunk(s, stage, k), &first, &count);
    L += count;
    for (int64_t l = first; l < first + count; ++l) Lm += td_config_moe_layer(c, (int)l);
  }
  int first_stage = stage == 0, last_stage = stage == pp - 1;

  /* tensor parallel (app/model/block.c td_model_tp_sum; sequence parallel: the same bytes
   * as a reduce-scatter and an all-gather): per layer two sums in forward
   * (attention and MLP outputs), two in backward (their inputs' gradients),
   * two more when blocks are recomputed; the embedding's output (first
   * stage), the head's input gradient and the vocabulary-parallel
   * cross-entropy's 3 statistics per row (last stage); per step the gradient
   * norm's per-tensor sums (trainer.c grad_sumsq) */
  if (tp > 1 && c->parallel_sequence_parallel) {
    /* sequence parallel (block.c sp_gather/td_model_sp_scatter; ring volume (p − 1)/p
     * of the whole): per layer forward 2 all-gathers of a norm output (the
     * activation type) and 2 reduce-scatters (float32); backward 2 gathers of
     * the residual gradient, 2 re-gathers of the norm outputs for the weight
     * gradients, 2 reduce-scatters, and the replicated gradients summed once
     * (td_model_rep_flush: 6C floats GPT-2, 2C LLaMA); blocks recomputation repeats
     * the forward's. First stage: the embedding's reduce-scatter and its
     * gradient's gather; last stage: the final norm gathered (forward and
     * again in backward), the input gradient reduce-scattered, its norm's
     * gradient summed (2C GPT-2, C LLaMA), the cross-entropy's statistics
     * over all rows (as without sp) */
    double f = (double)(tp - 1) / tp, at = bf16 ? 2.0 : 4.0, part = f * Nf * C;
    double rep = d.llama ? 2.0 * C : 6.0 * C, repf = d.llama ? C : 2.0 * C;
    double ag_at = (double)L * (4.0 + (blocks ? 2.0 : 0.0)), ag_f32 = (double)L * 2.0;
    double rs = (double)L * (4.0 + (blocks ? 2.0 : 0.0)), arr = (double)L;
    double ag_bytes = ag_at * part * at + ag_f32 * part * 4.0, rs_bytes = rs * part * 4.0;
    double ar_bytes = (double)L * ar(tp, rep, 4.0);
    if (first_stage) ag_f32 += 1, ag_bytes += part * 4.0, rs += 1, rs_bytes += part * 4.0;
    if (last_stage) {
      ag_at += 2, ag_bytes += 2.0 * part * at, rs += 1, rs_bytes += part * 4.0;
      arr += 3, ar_bytes += ar(tp, repf, 4.0) + ar(tp, 3.0 * Nf, 4.0);
    }
    add(o, TD_GROUP_TP, TD_COLL_ALLGATHER, (double)m * ag_bytes, (double)m * (ag_at + ag_f32));
    add(o, TD_GROUP_TP, TD_COLL_REDUCE_SCATTER, (double)m * rs_bytes, (double)m * rs);
    add(o, TD_GROUP_TP, TD_COLL_ALLREDUCE, (double)m * ar_bytes, (double)m * arr);
    add(o, TD_GROUP_TP, TD_COLL_ALLREDUCE, ar(tp, reg->n, 8.0), 1);
  } else if (tp > 1) {
    double per_layer = (4.0 + (blocks ? 2.0 : 0.0)) * ar(tp, Nf * C, 4.0);
    double micro = (double)L * per_layer + (first_stage ? ar(tp, Nf * C, 4.0) : 0.0) +
                   (last_stage ? ar(tp, Nf * C, 4.0) + ar(tp, 3.0 * Nf, 4.0) : 0.0);
    add(o, TD_GROUP_TP, TD_COLL_ALLREDUCE, (double)m * micro,
        (double)m * (double)L * (4 + 2 * blocks));
    add(o, TD_GROUP_TP, TD_COLL_ALLREDUCE, ar(tp, reg->n, 8.0), 1);
  }
  /* context parallel (block.c group_gather/group_scatter over cp_comm): per
   * layer the keys and values (2·KV·head size per row) all-gathered in
   * forward and again in backward, their gradients reduce-scattered */
  if (cp > 1) {
    double kv = Nf * 2.0 * (double)(d.KV * d.HS) / tp * 4.0 * (cp - 1);
    double gathers = 2.0 + (blocks ? 1.0 : 0.0);
    add(o, TD_GROUP_CP, TD_COLL_ALLGATHER, (double)m * (double)L * gathers * kv,
        (double)m * (double)L * gathers);
    add(o, TD_GROUP_CP, TD_COLL_REDUCE_SCATTER, (double)m * (double)L * kv, (double)m * (double)L);
  }
  /* pipeline (app/train/pipeline.c): every send and receive of this stage's
   * schedule, rows × C floats each, or 1/tp of them scattered over tp
   * (td_pipe_scatters), each receive then all-gathered over tp; per step
   * the gradient norm's per-tensor sums and the loss */
  if (pp > 1) {
    double msgs = 0, recvs = 0, part = rows * C * 4.0;
    for (int64_t i = 0; i < s->count[stage]; ++i) {
      int op = s->acts[stage][i].op;
      msgs += op == TD_OP_SEND_ACT || op == TD_OP_RECV_ACT || op == TD_OP_SEND_GRAD ||
              op == TD_OP_RECV_GRAD;
      recvs += op == TD_OP_RECV_ACT || op == TD_OP_RECV_GRAD;
    }
    if (td_pipe_scatters(c)) {
      part /= tp;
      add(o, TD_GROUP_TP, TD_COLL_ALLGATHER, recvs * (tp - 1) * part, recvs);
    }
    add(o, TD_GROUP_PP, TD_COLL_SENDRECV, msgs * part, msgs);
    add(o, TD_GROUP_PP, TD_COLL_ALLREDUCE, ar(pp, reg->n, 8.0) + ar(pp, 1, 8.0), 2);
    /* tied embedding (app/train/trainer.c, embed_sync): wte's gradient summed
     * over the first and last stage once a step, or every micro-batch at
     * ZeRO 2–3 (unless interleaved: once) */
    const td_param *wte = td_registry_find(reg, TD_PK_WTE, -1);
    if (d.tied && wte && wte->present && (first_stage || last_stage)) {
      int per_micro = zero >= 2 && c->parallel_virtual_stages <= 1;
      double times = per_micro ? (double)m : 1.0;
      add(o, TD_GROUP_EMBED, TD_COLL_ALLREDUCE, times * ar(2, (double)wte->local_numel, 4.0), times);
    }
  }
  /* data parallel × context parallel (parallel/zero.c): the gradients of the
   * local space of n floats, shards of S (a multiple of 16) */
  if (pb > 1) {
    double n = (double)reg->total_local, f = (double)(pb - 1) / pb;
    double S = (double)((((int64_t)reg->total_local + pb - 1) / pb + 15) / 16 * 16);
    double npad = S * pb, es = bf16 ? 2.0 : 4.0;
    int nt = 0;
    for (int i = 0; i < reg->n; ++i) nt += reg->p[i].present;
    if (zero == 0) {
      add(o, TD_GROUP_DP, TD_COLL_ALLREDUCE, 2.0 * f * 4.0 * n, 1);
    } else if (zero <= 2) {
      double rs = zero == 1 ? 1.0 : (double)m;
      add(o, TD_GROUP_DP, TD_COLL_REDUCE_SCATTER, rs * f * 4.0 * n, rs);
      /* the updated parameters: unit by unit in the working precision
       * (parallel.overlap_param_gather), else the whole padded buffer at once */
      if (c->parallel_overlap_param_gather && strcmp(c->optimizer_offload, "cpu") != 0)
        add(o, TD_GROUP_DP, TD_COLL_ALLGATHER, f * es * n, (double)L + 2.0);
      else
        add(o, TD_GROUP_DP, TD_COLL_ALLGATHER, f * es * npad, 1);
    } else {
      /* stage 3: each block gathered in forward and again in backward, but
       * the two block slots keep the last two gathered across the turn:
       * L + (2m − 1)(L − 2) block gathers; the persistent units once */
      double block = d.avg_block_params / tp, persist = n - (double)L * block;
      double gathers = L > 2 ? (double)L + (2.0 * (double)m - 1.0) * ((double)L - 2.0) : (double)L;
      add(o, TD_GROUP_DP, TD_COLL_REDUCE_SCATTER, (double)m * f * 4.0 * n, (double)m);
      add(o, TD_GROUP_DP, TD_COLL_ALLGATHER, f * es * (persist + gathers * block), gathers + 1);
    }
    add(o, TD_GROUP_DP, TD_COLL_ALLREDUCE, ar(pb, nt, 8.0) + ar(pb, 1, 8.0), 2);
  }
  /* expert parallelism (app/model/moe.c, counted as TD_COLL_SENDRECV of the
   * dp group; the gradients above are the dense ones' over dp × cp and the
   * experts' — E/ep of them here — taken as over the same group): per
   * sparse layer and micro-batch the rows that leave this rank, (ep − 1)/ep
   * of its N·K slots under balanced routing: forward the experts' inputs
   * (activation type) and their outputs back (float32); backward the
   * outputs' gradients (the activation type for LLaMA, float32 for GPT-2),
   * the inputs again and their gradients back (float32); recomputed blocks
   * repeat the forward's two */
  if (ep > 1 && Lm > 0) {
    double at = bf16 ? 2.0 : 4.0, rows_x = Nf * (double)d.K * (double)(ep - 1) / ep;
    double row = C * (at + 4.0 + (d.llama ? at : 4.0) + at + 4.0 + (blocks ? at + 4.0 : 0.0));
    add(o, TD_GROUP_DP, TD_COLL_SENDRECV, (double)m * (double)Lm * rows_x * row,
        (double)m * (double)Lm * (5.0 + (blocks ? 2.0 : 0.0)));
  }
  /* the step's counted targets (the loss mask's), summed over dp (app/train/trainer.c) */
  if (c->parallel_dp > 1)
    add(o, TD_GROUP_DP, TD_COLL_ALLREDUCE, ar((int)c->parallel_dp, 1, 8.0), 1);
done:
  td_schedule_destroy(&s);
  td_registry_destroy(&reg);
  return st;
}

/* ---- time ---------------------------------------------------------------------- */

/* The link a group of p members, `stride` ranks apart, uses: inside a node
 * when stride·p ranks fit on one. */
static const td_link *link_of(const td_cluster *c, int stride, int p) {
  return (int64_t)stride * p <= c->devices_per_node ? &c->intra : &c->inter;
}

/* α–β time of `calls` collectives of kind moving `bytes` in all over p
 * members; reduce-scatters and all-gathers at their ratio of the link's β. */
static double coll_time(const td_cluster *c, const td_link *l, int kind, int p, double bytes,
                        double calls) {
  if (bytes <= 0) return 0.0;
  double steps = kind == TD_COLL_ALLREDUCE ? 2.0 * (p - 1) : kind == TD_COLL_SENDRECV ? 1.0 : p - 1;
  double ratio = kind == TD_COLL_REDUCE_SCATTER ? c->rs_ratio
                 : kind == TD_COLL_ALLGATHER    ? c->ag_ratio
                                                : 1.0;
  /* small collectives at their own rates (links.small_*): on a host whose
   * MPI takes fresh pages for every large call's temporaries, a 16 MiB
   * all-reduce ran 8× faster per byte than a 64 MiB one */
  if (c->small_bytes > 0 && kind != TD_COLL_SENDRECV && bytes / calls <= c->small_bytes)
    ratio = kind == TD_COLL_REDUCE_SCATTER ? c->small_rs
            : kind == TD_COLL_ALLGATHER    ? c->small_ag
                                           : c->small_ar;
  /* a ring's bus bandwidth: a fraction of the link's (NCCL reaches 70–90%
   * of NVLink's and most of a NIC's), half of it at a message of half_bytes
   * (per call, the bytes this rank moves) */
  double per = bytes / calls, bw = l->bw * l->bus_eff * ratio;
  if (l->half_bytes > 0 && kind != TD_COLL_SENDRECV) bw *= per / (per + l->half_bytes);
  return calls * steps * l->lat + bytes / bw;
}

static double group_time(const td_cluster *cl, const td_plan_comm *pc, int g, int p, int stride) {
  double t = 0;
  for (int k = 0; k < TD_COLL_KINDS; ++k)
    t += coll_time(cl, link_of(cl, stride, p), k, p, pc->bytes[g][k], pc->calls[g][k]);
  return t;
}

/* The worst rank's memory: td_trainer_plan (the allocating code's size query)
 * on a virtual grid, first and last stage, tp/cp/dp rank 0. */
static td_status plan_memory(const td_config *c, td_plan_result *r) {
  int stages[2] = {0, (int)c->parallel_pp - 1};
  td_dcomm_kind dcomm = strcmp(c->run_device, "cuda") == 0 ? TD_DCOMM_NCCL : TD_DCOMM_OFF;
  r->mem_total = -1;
  for (int i = 0; i < (stages[1] > 0 ? 2 : 1); ++i) {
    td_grid g;
    td_mem_plan mp;
    td_grid_virtual((int)c->parallel_dp, (int)c->parallel_cp, (int)c->parallel_tp,
                    (int)c->parallel_pp, 0, 0, 0, stages[i], &g);
    TD_CHECK(td_grid_set_ep(&g, (int)c->parallel_ep));
    TD_CHECK(td_trainer_plan(c, &g, dcomm, &mp));
    int64_t tot = mp.param + mp.grad + mp.optim + mp.work + mp.act;
    if (tot > r->mem_total) r->mem_total = tot, r->mem = mp, r->mem_stage = stages[i];
  }
  return TD_OK;
}

td_status td_plan_eval(const td_config *c, const td_cluster *cl, td_plan_result *r) {
  td_status st = TD_OK;
  td_schedule *s = NULL;
  double *fs = NULL, *bs = NULL, *ws = NULL;
  memset(r, 0, sizeof *r);
  r->cfg = *c;
  r->baseline = cl->baseline;
  /* a configuration the allocating code refuses still gets its time (the
   * published runs are larger than some of trident's limits) */
  td_status ms = plan_memory(c, r);
  if (ms == TD_ERR_NOMEM) return ms;
  if (ms != TD_OK) {
    snprintf(r->refused, sizeof r->refused, "%s", td_error_message());
    td_error_clear();
    r->mem_total = 0, r->fits = 0, r->over_bytes = 0;
  } else {
    /* the peak: every buffer, the process's own bytes and, on a CPU, the
     * initial parameters' host copy that exists beside them at start-up (as
     * large as ZeRO 0's gradient all-reduces in flight, whose temporaries
     * MPICH allocates per message) */
    if (strcmp(c->run_device, "cpu") == 0) r->startup = (double)r->mem.startup;
    /* checkpoint staging (checkpoint.async: 12 bytes an owned parameter)
     * lives through training, in host memory: the CPU's */
    if (strcmp(c->run_device, "cpu") == 0) r->ckpt = (double)r->mem.ckpt;
    double need = (double)r->mem_total + cl->baseline + (r->startup > r->ckpt ? r->startup : r->ckpt);
    r->fits = need <= cl->mem_bytes;
    r->over_bytes = r->fits ? 0.0 : need - cl->mem_bytes;
  }

  td_model_dims d;
  td_config_dims(c, &d);
  int dp = (int)c->parallel_dp, cp = (int)c->parallel_cp, tp = (int)c->parallel_tp;
  int pp = (int)c->parallel_pp, world = dp * cp * tp * pp, zero = (int)c->parallel_zero;
  int bf16 = strcmp(c->training_precision, "bf16") == 0;
  int blocks = c->training_recompute[0] == 'b', attn = c->training_recompute[0] == 'a';
  int64_t B = td_config_micro_batch(c), m = td_config_accum_steps(c);
  double tokens = (double)(c->training_global_batch * d.T);
  double fpt = td_flops_per_token(c);
  r->model_flops = fpt * tokens;
  /* FLOPs per token of one block's forward on one rank (td_flops_per_token's
   * terms over 3: forward is a third of training), and the head's */
  double A = (double)(d.H * d.HS), T = (double)d.T;
  double blk_f = (2.0 * d.avg_block_matmul + 4.0 * A * T) / tp;
  double blk_mm = 2.0 * d.avg_block_matmul / tp, blk_att = 4.0 * A * T / tp;
  double head_f = 2.0 * (double)d.V * (double)d.C / tp;
  /* recomputation in hardware FLOPs: blocks → every block's forward again;
   * attention → the attention scores (Q·Kᵀ) again. The fused attention
   * (model.attention: fused) recomputes inside its backward: its two passes
   * make Q·Kᵀ twice and dO·Vᵀ once more than a materialised backward (7
   * products for 4), and selective recomputation has nothing to add */
  int fused = strcmp(c->model_attention, "fused") == 0;
  double fused_f = fused ? 6.0 * A * T / tp : 0.0;
  if (fused) attn = 0;
  double rec_f = (blocks ? blk_f : attn ? 2.0 * A * T / tp : 0.0) + fused_f;
  /* the fused head (model.head: fused) computes its logits again in backward */
  int fused_head = strcmp(c->model_head, "fused") == 0;
  r->hw_flops = r->model_flops + rec_f * tp * (double)d.L * tokens +
                (fused_head ? head_f * tp * tokens : 0.0);

  /* matmul rate: small shapes (the rows of a micro-batch or the width per tp
   * rank below small_matmul_dim) reach a lower fraction of peak */
  double rows = (double)(B * d.T / cp), width = (double)d.C / tp;
  double dim = rows < width ? rows : width;
  r->eff = dim < cl->small_dim ? cl->eff_small : cl->eff_large;
  double peak = bf16 ? cl->peak_bf16 : cl->peak_fp32, rate = peak * r->eff;
  /* one layer's and the head's seconds a micro-batch: forward, input- and
   * weight-gradient (lc, hc); the layer's recomputation (lrec) */
  td_plan_cost lc, hc;
  double lrec;
  if (cl->sms > 0) {
    /* the GPU model: every product by its shape, the non-matmul kernels by
     * their bytes (plan_device.c) */
    td_plan_layer_cost(c, cl, B, &lc);
    td_plan_head_cost(c, cl, B, &hc);
    lrec = blocks ? lc.f : attn ? lc.att_rec : 0.0;
    r->eff = 2.0 * d.avg_block_matmul / tp * (double)B * T / cp /
             ((lc.f - lc.att_f - lc.ew_f) * peak);
  } else {
    /* the efficiency model: FLOPs at peak × efficiency; the attention
     * kernels (scores, softmax, att·V) at their own calibrated rate when the
     * cluster file has one; the non-matmul kernels' memory traffic
     * (device.elementwise_passes over the bytes a layer's forward writes,
     * td_model.layer_bytes of the worst rank, per token of its micro-batch) */
    double att_rate = cl->att_rate > 0 ? cl->att_rate : rate;
    if (fused && cl->fatt_rate > 0) att_rate = cl->fatt_rate; /* the kernels the deck runs */
    double ew = cl->ew_passes * r->mem.layer_bytes / ((double)B * T / cp) / cl->mem_bw;
    double toks = (double)B * T / cp;
    double f = toks * (blk_mm / rate + blk_att / att_rate + ew);
    memset(&lc, 0, sizeof lc), memset(&hc, 0, sizeof hc);
    lc.f = lc.bx = lc.bw = f;
    lc.att_f = toks * blk_att / att_rate;
    hc.f = hc.bx = hc.bw = toks * head_f / rate;
    lrec = blocks ? f : attn ? toks * 2.0 * A * T / tp / att_rate : 0.0;
    /* the fused attention's backward recomputes inside (7 products for 4) */
    lrec += toks * fused_f / att_rate;
  }

  /* communication per stage: times per step from the bytes */
  int stride[TD_GROUP_COUNT] = {1, tp, tp * cp * dp, tp * cp * dp * (pp - 1), tp};
  TD_CHECK(td_pipe_schedule(c, &s));
  int n = pp * s->v;
  fs = calloc((size_t)n, sizeof *fs), bs = calloc((size_t)n, sizeof *bs);
  ws = calloc((size_t)n, sizeof *ws);
  if (!fs || !bs || !ws) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory");
  double tp_s[2] = {0, 0}, cp_s[2] = {0, 0}, ep_s[2] = {0, 0}, p2p = 0, worst_dp = 0;
  double worst_embed = 0;
  double worst_pp = 0, worst_bytes = 0, worst_dp_ag = 0;
  for (int stage = 0; stage < pp; ++stage) {
    if (stage > 0 && stage < pp - 1 && pp > 2 && stage != 1) continue; /* middles are alike */
    td_plan_comm pc;
    TD_CHECK_GOTO(td_plan_comm_bytes(c, stage, &pc));
    double tot = 0;
    for (int g = 0; g < TD_GROUP_COUNT; ++g)
      for (int k = 0; k < TD_COLL_KINDS; ++k) tot += pc.bytes[g][k];
    if (tot > worst_bytes) worst_bytes = tot;
    double t_tp = group_time(cl, &pc, TD_GROUP_TP, tp, 1);
    double t_cp = group_time(cl, &pc, TD_GROUP_CP, cp, tp);
    /* the experts' all-to-all (over ep ranks of stride tp) blocks the layers
     * it is in: on the critical path like cp's, not with the gradients */
    double t_ep = coll_time(cl, link_of(cl, tp, (int)c->parallel_ep), TD_COLL_SENDRECV,
                            (int)c->parallel_ep, pc.bytes[TD_GROUP_DP][TD_COLL_SENDRECV],
                            pc.calls[TD_GROUP_DP][TD_COLL_SENDRECV]);
    pc.bytes[TD_GROUP_DP][TD_COLL_SENDRECV] = 0, pc.calls[TD_GROUP_DP][TD_COLL_SENDRECV] = 0;
    double t_dp = group_time(cl, &pc, TD_GROUP_DP, dp * cp, tp);
    double t_dp_ag = coll_time(cl, link_of(cl, tp, dp * cp), TD_COLL_ALLGATHER, dp * cp,
                               pc.bytes[TD_GROUP_DP][TD_COLL_ALLGATHER],
                               pc.calls[TD_GROUP_DP][TD_COLL_ALLGATHER]);
    double t_pp = group_time(cl, &pc, TD_GROUP_PP, pp, stride[TD_GROUP_PP]);
    double t_em = group_time(cl, &pc, TD_GROUP_EMBED, 2, stride[TD_GROUP_EMBED] + (pp == 1));
    int end = stage == 0 ? 0 : 1;
    if (t_tp > tp_s[end]) tp_s[end] = t_tp;
    if (t_cp > cp_s[end]) cp_s[end] = t_cp;
    if (t_ep > ep_s[end]) ep_s[end] = t_ep;
    if (t_dp > worst_dp) worst_dp = t_dp, worst_dp_ag = t_dp_ag;
    if (t_pp > worst_pp) worst_pp = t_pp;
    if (t_em > worst_embed) worst_embed = t_em;
  }
  r->comm_bytes = worst_bytes;
  /* one message between stages: α + rows·C·4 / β on the pipeline's link
   * (1/tp of it scattered over tp; the receiver's all-gather is in the tp
   * group's time) */
  if (pp > 1) {
    const td_link *l = link_of(cl, stride[TD_GROUP_PP], pp);
    double part = (double)td_model_rows(c, B) * (double)d.C * 4.0;
    p2p = l->lat + (td_pipe_scatters(c) ? part / tp : part) / l->bw;
  }
  /* per (stage, chunk): F, B, W seconds of one micro-batch: the layers' and
   * (last chunk) the head's, plus the recomputation in B; tp and cp
   * collectives do not overlap compute in trident (links.overlap_tp: the
   * fraction a published system hid): their time per micro-batch is spread
   * over the layers (a third forward, two thirds backward) */
  int split = strcmp(c->parallel_pp_schedule, "zb-h1") == 0;
  double busy_max = 0;
  for (int stage = 0; stage < pp; ++stage) {
    int end = stage == 0 ? 0 : 1;
    int64_t Ls = 0;
    for (int k = 0; k < s->v; ++k) {
      int64_t first, count;
      td_config_chunk_layers(c, td_sched_model_chunk(s, stage, k), &first, &count);
      Ls += count;
    }
    double comm_micro = ((1.0 - cl->overlap_tp) * (tp_s[end] + cp_s[end]) + ep_s[end]) /
                        (double)m / (double)(Ls > 0 ? Ls : 1);
    double busy = 0; /* the stage's compute over all its chunks */
    for (int k = 0; k < s->v; ++k) {
      int64_t first, count;
      int mc = td_sched_model_chunk(s, stage, k);
      td_config_chunk_layers(c, mc, &first, &count);
      double nl = (double)count, head = mc == pp * s->v - 1;
      double f = nl * lc.f + (head ? hc.f : 0.0);
      double bx = nl * lc.bx + (head ? hc.bx : 0.0), bw = nl * lc.bw + (head ? hc.bw : 0.0);
      double rec = nl * lrec;
      /* the fused head computes its logits again in backward, and sums its
       * weight gradient there, chunk by chunk (in B of a split backward) */
      if (head && fused_head) rec += hc.f, bx += hc.bw, bw -= hc.bw;
      double cm = comm_micro * nl;
      fs[stage * s->v + k] = f + cm / 3.0;
      if (split) {
        bs[stage * s->v + k] = bx + rec + cm / 3.0;
        ws[stage * s->v + k] = bw + cm / 3.0;
      } else {
        bs[stage * s->v + k] = bx + bw + rec + 2.0 * cm / 3.0;
        ws[stage * s->v + k] = 0.0;
      }
      busy += (double)m * (f + bx + bw + rec);
    }
    if (busy > busy_max) busy_max = busy;
  }
  td_sched_costs costs = {0, 0, 0, p2p, fs, bs, ws};
  td_sched_sim sim;
  TD_CHECK_GOTO(td_schedule_simulate(s, &costs, &sim, NULL, NULL));
  r->bubble = pp > 1 ? sim.bubble : 0.0;
  r->compute_s = busy_max;
  /* data-parallel collectives: the gradients' reductions (all-reduce,
   * reduce-scatter) and the parameters' gathers, each hidden (the fraction
   * links.overlap of it) behind the compute that runs while it is in flight,
   * up to that compute's length. trident (parallel/zero.c): ZeRO 0 and 1
   * launch each unit's reduction as the last micro-batch's backward finishes
   * it; ZeRO 2–3 every micro-batch's (behind all the backward passes); ZeRO
   * 1–2 gather the updated parameters after the optimizer: exposed
   * (parallel.overlap_param_gather: unit by unit during the next forward);
   * ZeRO 3 gathers every unit ahead of its use (prefetch). A published
   * system's own (links.overlap_dp): none, grads (behind the last
   * backward), all (and the gathers behind the first forward) */
  double bwd_last = 0, fwd_first = 0, all_compute = busy_max, all_bwd = 0;
  for (int k = 0; k < s->v; ++k) bwd_last += bs[k] + ws[k], fwd_first += fs[k];
  all_bwd = (double)m * bwd_last;
  double t_grads = worst_dp - worst_dp_ag, t_gather = worst_dp_ag, win_g = 0, win_a = 0;
  switch (cl->overlap_dp) {
  case TD_OVERLAP_DP_NONE: break;
  case TD_OVERLAP_DP_GRADS: win_g = bwd_last; break;
  case TD_OVERLAP_DP_ALL: win_g = bwd_last, win_a = fwd_first; break;
  default:
    win_g = zero <= 1 ? bwd_last : all_bwd;
    win_a = zero == 3 ? all_compute : c->parallel_overlap_param_gather ? fwd_first : 0.0;
  }
  /* both kinds share the link: together they hide behind at most the
   * compute their windows cover (disjoint but for ZeRO 3's, which spans the
   * step), never more than it */
  double union_w = win_a >= all_compute ? all_compute : fmin(win_g + win_a, all_compute);
  double hidden = fmin(fmin(t_grads, win_g) + fmin(t_gather, win_a), union_w);
  double dp_exposed = t_grads + t_gather - cl->overlap * hidden;
  /* the optimizer: AdamW reads and writes parameters, gradients and two
   * moments of the owned shard (4 × 4 bytes, twice), memory-bound */
  double owned = (double)r->mem.params_local / (zero >= 1 ? dp * cp : 1);
  r->optim_s = owned * 32.0 / cl->mem_bw;
  r->comm_s[TD_GROUP_TP] = fmax(tp_s[0], tp_s[1]);
  r->comm_s[TD_GROUP_CP] = fmax(cp_s[0], cp_s[1]);
  r->comm_s[TD_GROUP_DP] = worst_dp + fmax(ep_s[0], ep_s[1]); /* and the experts' all-to-all */
  r->comm_s[TD_GROUP_PP] = worst_pp;
  r->comm_s[TD_GROUP_EMBED] = worst_embed;
  r->exposed_s[TD_GROUP_TP] = (1.0 - cl->overlap_tp) * r->comm_s[TD_GROUP_TP];
  r->exposed_s[TD_GROUP_CP] = (1.0 - cl->overlap_tp) * r->comm_s[TD_GROUP_CP];
  r->exposed_s[TD_GROUP_DP] = dp_exposed + fmax(ep_s[0], ep_s[1]);
  /* the simulator puts each message on the receiver's path: pipeline time
   * shows as idle (the bubble), at most the messages' time */
  r->exposed_s[TD_GROUP_PP] = fmin(r->comm_s[TD_GROUP_PP], busy_max * r->bubble);
  r->exposed_s[TD_GROUP_EMBED] = worst_embed;
  r->step_s = sim.makespan + dp_exposed + worst_embed + r->optim_s;
  r->tokens_per_s = tokens / r->step_s;
  r->tflops = r->model_flops / r->step_s / world / 1e12;
  r->hw_tflops = r->hw_flops / r->step_s / world / 1e12;
  r->mfu = r->model_flops / r->step_s / world / peak;
done:
  free(fs), free(bs), free(ws);
  td_schedule_destroy(&s);
  return st;
}
