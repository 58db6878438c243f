/* test_actmem.c — trident's activation-memory model (the one in app/model.c:
 * every buffer through dev_alloc into act_bytes, what `trident check`
 * prints) against Korthikanti et al. 2022 ("Reducing Activation
 * Recomputation in Large Transformer Models"), Table 2: per layer, in bytes
 * with 16-bit activations (s sequence, b micro-batch, h width, a heads, t tp)
 *   no parallelism                sbh(34 + 5as/h)
 *   tensor parallel               sbh(10 + 24/t + 5as/(ht))
 *   tp + sequence parallel        (sbh/t)(34 + 5as/h)
 *   tp + sp + selective recompute 34·sbh/t
 * (tp without sp + selective: sbh(10 + 24/t)).
 *
 * Trident's bytes per layer are act_bytes of a model with L + 1 layers minus
 * that of L layers (size queries: td_model_create without a back-end, on a
 * hand-made grid of one tp rank's coordinates), GPT-2 with bf16 activations.
 * Per layer trident keeps (N = sb rows, Nl = N/t under sp, else N):
 *   res2, the block output res3   float32 (N_l, h)  8 bytes   (paper: the two
 *                                 LayerNorm inputs, 16-bit:     4)
 *   ln1, ln2 (matmul inputs)      bf16 (N_l, h)     4         (paper: 4)
 *   LayerNorm mean and rstd       float32 4·N_l     16·N_l    (paper: none)
 *   q, k, v                       float32 (N, 3h/t) 12/t      (paper: 6/t)
 *   attention output (proj input) bf16 (N, h/t)     2/t       (paper: 2/t)
 *   fc output (GELU input)        float32 (N, 4h/t) 16/t      (paper: 8/t)
 *   GELU output (fcproj input)    bf16 (N, 4h/t)    8/t       (paper: 8/t)
 *   no dropout masks              0                           (paper: 2 replicated
 *                                                               + 1 per score)
 *   softmax probabilities         float32 4·as²b/t            (paper: 2 softmax
 *                                 (none under recompute:        + 1 mask + 2 dropout
 *                                 attention)                    output = 5·as²b/t)
 * so trident = sbh·(12 + 38/t) + 16sb + 4as²b/t without sp and
 * (sbh/t)·50 + 16sb/t + 4as²b/t with it: the paper's 10 → 12 (+4 float32
 * residual stream, −2 masks), 24 → 38 (+6 q/k/v, +8 GELU input in float32),
 * 5 → 4 per score (+2 float32 probabilities, −1 mask, −2 dropout output).
 * The test demands trident's bytes equal that prediction exactly, prints
 * both beside the paper's, and prints the whole rank's act_bytes (scratch,
 * embedding, head) of a T = 4096 deck at tp 2 with and without sp. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/td_config.h"
#include "app/td_model.h"
#include "parallel/td_grid.h"
#include "td_error.h"

static int g_fail;

/* act_bytes of GPT-2 (vocab V) at s, h, a, t, cp c, L layers, micro-batch b. */
static double act_of_cp(int64_t s, int64_t h, int64_t a, int64_t t, int64_t c, int64_t L,
                        int64_t b, int64_t V, int sp, const char *recompute,
                        const char *precision) {
  char text[2048];
  snprintf(text, sizeof text,
           "model: {arch: gpt2, vocab_size: %lld, seq_len: %lld, layers: %lld, dim: %lld, "
           "heads: %lld}\n"
           "parallel: {dp: 1, cp: %lld, tp: %lld, pp: 1, sequence_parallel: %s}\n"
           "data: {train: none.h5}\n"
           "training: {global_batch: %lld, steps: 1, precision: %s, recompute: %s}\n",
           (long long)V, (long long)s, (long long)L, (long long)h, (long long)a, (long long)c,
           (long long)t,
           sp ? "true" : "false", (long long)b, precision, recompute);
  td_config cfg;
  if (td_config_load_text("actmem", text, &cfg) != TD_OK) {
    fprintf(stderr, "%s\n", td_error_message());
    exit(1);
  }
  td_grid g;
  memset(&g, 0, sizeof g);
  g.dp = 1, g.cp = (int)c, g.tp = (int)t, g.pp = 1, g.size = (int)(t * c);
  g.world = g.tp_comm = g.dp_comm = g.pp_comm = MPI_COMM_NULL, g.embed_comm = MPI_COMM_NULL;
  g.cp_comm = g.dpcp_comm = MPI_COMM_NULL;
  td_model *m = NULL;
  int nslots = 1;
  if (td_model_create(&cfg, &g, NULL, NULL, b, &nslots, 0, &m) != TD_OK) {
    fprintf(stderr, "%s\n", td_error_message());
    exit(1);
  }
  double bytes = m->act_bytes;
  td_model_destroy(&m);
  return bytes;
}

static double act_of(int64_t s, int64_t h, int64_t a, int64_t t, int64_t L, int64_t b, int64_t V,
                     int sp, const char *recompute, const char *precision) {
  return act_of_cp(s, h, a, t, 1, L, b, V, sp, recompute, precision);
}

/* The paper's bytes per layer. */
static double paper(double s, double b, double h, double a, double t, int sp, int sel) {
  double sbh = s * b * h, att = sel ? 0.0 : 5.0 * a * s / h;
  return sp ? sbh / t * (34.0 + att) : sbh * (10.0 + 24.0 / t + att / t);
}

/* What trident should keep per layer (the header's table), bf16 activations. */
static double predicted(double s, double b, double h, double a, double t, int sp, int sel) {
  double sbh = s * b * h, sb = s * b, att = sel ? 0.0 : 4.0 * a * s * s * b / t;
  return sp ? sbh / t * 50.0 + 16.0 * sb / t + att : sbh * (12.0 + 38.0 / t) + 16.0 * sb + att;
}

int main(void) {
  const int64_t V = 50304, b = 1;
  const struct { int64_t s, h, a; } shapes[] = {{2048, 2304, 24}, {2048, 8192, 64}};
  const int64_t tps[] = {1, 2, 8};
  printf("%5s %5s %3s %2s %-22s %12s %12s %12s %8s\n", "s", "h", "a", "t", "mode",
         "trident MiB", "predicted", "paper MiB", "ratio");
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i)
    for (size_t j = 0; j < sizeof tps / sizeof tps[0]; ++j)
      for (int mode = 0; mode < 4; ++mode) {
        int64_t s = shapes[i].s, h = shapes[i].h, a = shapes[i].a, t = tps[j];
        int sp = mode >= 2, sel = mode == 1 || mode == 3;
        if (sp && t == 1) continue;
        const char *rc = sel ? "attention" : "none";
        double l1 = act_of(s, h, a, t, 1, b, V, sp, rc, "bf16");
        double l2 = act_of(s, h, a, t, 2, b, V, sp, rc, "bf16");
        double got = l2 - l1, want = predicted((double)s, (double)b, (double)h, (double)a,
                                               (double)t, sp, sel);
        double ref = paper((double)s, (double)b, (double)h, (double)a, (double)t, sp, sel);
        char name[32];
        snprintf(name, sizeof name, "%s%s", t == 1 ? "none" : sp ? "tp+sp" : "tp",
                 sel ? " +selective" : "");
        printf("%5lld %5lld %3lld %2lld %-22s %12.1f %12.1f %12.1f %8.3f%s\n", (long long)s,
               (long long)h, (long long)a, (long long)t, name, got / 1048576.0, want / 1048576.0,
               ref / 1048576.0, got / ref, got == want ? "" : "  MISMATCH");
        if (got != want) ++g_fail;
      }
  /* The whole rank (scratch, embedding, head, one micro-batch in flight) at
   * T = 4096, tp 2: sequence parallelism against tp alone. */
  printf("\nwhole rank, GPT-2 s 4096 h 2048 a 16 L 24 b 1 bf16, tp 2:\n");
  const char *modes[] = {"none", "attention"};
  for (int r = 0; r < 2; ++r) {
    double tp = act_of(4096, 2048, 16, 2, 24, 1, V, 0, modes[r], "bf16");
    double sp = act_of(4096, 2048, 16, 2, 24, 1, V, 1, modes[r], "bf16");
    printf("  recompute %-9s  tp %8.1f MiB  tp+sp %8.1f MiB  ratio %.3f\n", modes[r],
           tp / 1048576.0, sp / 1048576.0, sp / tp);
    if (!(sp < tp)) ++g_fail;
  }
  /* Context parallelism: a layer keeps its rank's s/c rows of every
   * activation and (a/t, s/c, s) scores — the table's bytes with s/c rows
   * and the score term divided by c (the gathered keys and values are one
   * shared buffer, not per layer). */
  printf("\nper layer with context parallelism (tp 8 + sp, bf16):\n");
  for (int64_t c = 2; c <= 4; c *= 2)
    for (int sel = 0; sel < 2; ++sel) {
      int64_t s = 2048, h = 8192, a = 64, t = 8;
      const char *rc = sel ? "attention" : "none";
      double got = act_of_cp(s, h, a, t, c, 2, b, V, 1, rc, "bf16") -
                   act_of_cp(s, h, a, t, c, 1, b, V, 1, rc, "bf16");
      double sc = (double)s / (double)c, sbh = sc * (double)b * (double)h;
      double want = sbh / (double)t * 50.0 + 16.0 * sc * (double)b / (double)t +
                    (sel ? 0.0 : 4.0 * (double)a * sc * (double)s * (double)b / (double)t);
      double cp1 = predicted((double)s, (double)b, (double)h, (double)a, (double)t, 1, sel);
      printf("  cp %lld %-10s %10.1f MiB  predicted %10.1f  cp 1 %10.1f  ratio %.3f%s\n",
             (long long)c, sel ? "selective" : "none", got / 1048576.0, want / 1048576.0,
             cp1 / 1048576.0, got / cp1, got == want ? "" : "  MISMATCH");
      if (got != want) ++g_fail;
    }
  printf("%s\n", g_fail ? "FAILED" : "all per-layer bytes as predicted");
  return g_fail ? 1 : 0;
}
