/* test_actmem.c — trident's activation-memory model (the one in app/model/model.c:
 * every buffer through dev_alloc into act_bytes and the model's allocation
 * ledger, what `trident check` prints) against Korthikanti et al. 2022
 * ("Reducing Activation Recomputation in Large Transformer Models"), Table
 * 2: per layer, in bytes with 16-bit activations (s sequence, b micro-batch,
 * h width, a heads, t tp)
 *   no parallelism                sbh(34 + 5as/h)
 *   tensor parallel               sbh(10 + 24/t + 5as/(ht))
 *   tp + sequence parallel        (sbh/t)(34 + 5as/h)
 *   tp + sp + selective recompute 34·sbh/t
 *   full recompute                2sbh (the layer input), 2sbh/t with sp
 * (tp without sp + selective: sbh(10 + 24/t)).
 *
 * Trident's bytes per layer are act_bytes of a model with L + 1 layers minus
 * that of L layers (size queries: td_model_create without a back-end, on a
 * hand-made grid of one tp rank's coordinates), GPT-2 with bf16 activations;
 * every query's ledger must sum to its act_bytes exactly.
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
 * Under recompute: blocks a layer keeps res3 alone, float32: 4·sbh (/t with
 * sp). The test demands trident's bytes equal that prediction exactly and
 * prints both beside the paper's.
 *
 * Storage set to the paper's: the per-layer difference of the two ledgers,
 * buffer by buffer (element counts from the allocating code), priced as the
 * paper stores them (at_paper below: every kept tensor 16-bit, no LayerNorm
 * statistics, the dropout tensors trident lacks added with the shapes of
 * trident's buffers), must equal the paper's formula to the byte in every
 * case; a per-layer buffer the table does not name fails the test.
 *
 * Last, the whole rank's act_bytes (scratch, embedding, head) of a T = 4096
 * deck at tp 2 with and without sp, and the per-layer bytes under context
 * parallelism. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/deck/td_config.h"
#include "app/model/td_model.h"
#include "parallel/td_grid.h"
#include "td_error.h"

static int g_fail;

/* A size query and what it points to (its deck and grid). */
typedef struct {
  td_config cfg;
  td_grid g;
  td_model *m;
} sizeq;

/* q->m: a size query of GPT-2 (vocab V) at s, h, a, t, cp c, L layers,
 * micro-batch b, on a hand-made grid of one rank's coordinates. Its ledger
 * must sum to act_bytes exactly. The caller destroys q->m. */
static void query(sizeq *q, int64_t s, int64_t h, int64_t a, int64_t t, int64_t c, int64_t L,
                  int64_t b, int64_t V, int sp, const char *recompute, const char *precision) {
  char text[2048];
  snprintf(text, sizeof text,
           "model: {arch: gpt2, vocab_size: %lld, seq_len: %lld, layers: %lld, dim: %lld, "
           "heads: %lld, attention: materialized, head: materialized}\n"
           "parallel: {dp: 1, cp: %lld, tp: %lld, pp: 1, sequence_parallel: %s}\n"
           "data: {train: none.h5}\n"
           "training: {global_batch: %lld, steps: 1, precision: %s, recompute: %s}\n",
           (long long)V, (long long)s, (long long)L, (long long)h, (long long)a, (long long)c,
           (long long)t,
           sp ? "true" : "false", (long long)b, precision, recompute);
  if (td_config_load_text("actmem", text, &q->cfg) != TD_OK) {
    fprintf(stderr, "%s\n", td_error_message());
    exit(1);
  }
  td_grid *g = &q->g;
  memset(g, 0, sizeof *g);
  g->dp = 1, g->cp = (int)c, g->tp = (int)t, g->pp = 1, g->size = (int)(t * c);
  g->world = g->tp_comm = g->dp_comm = g->pp_comm = MPI_COMM_NULL, g->embed_comm = MPI_COMM_NULL;
  g->cp_comm = g->dpcp_comm = MPI_COMM_NULL;
  int nslots = 1;
  q->m = NULL;
  if (td_model_create(&q->cfg, g, NULL, NULL, b, &nslots, 0, &q->m) != TD_OK) {
    fprintf(stderr, "%s\n", td_error_message());
    exit(1);
  }
  const td_model *m = q->m;
  int64_t sum = 0;
  for (int i = 0; i < m->nledger; ++i) sum += m->ledger[i].n * (int64_t)m->ledger[i].es;
  if ((double)sum != m->act_bytes) {
    printf("ledger: %lld bytes in %d entries, act_bytes %.0f  MISMATCH\n", (long long)sum,
           m->nledger, m->act_bytes);
    ++g_fail;
  }
}

/* act_bytes of GPT-2 (vocab V) at s, h, a, t, cp c, L layers, micro-batch b. */
static double act_of_cp(int64_t s, int64_t h, int64_t a, int64_t t, int64_t c, int64_t L,
                        int64_t b, int64_t V, int sp, const char *recompute,
                        const char *precision) {
  sizeq q;
  query(&q, s, h, a, t, c, L, b, V, sp, recompute, precision);
  double bytes = q.m->act_bytes;
  td_model_destroy(&q.m);
  return bytes;
}

static double act_of(int64_t s, int64_t h, int64_t a, int64_t t, int64_t L, int64_t b, int64_t V,
                     int sp, const char *recompute, const char *precision) {
  return act_of_cp(s, h, a, t, 1, L, b, V, sp, recompute, precision);
}

/* training.recompute: none, attention (the paper's selective), blocks (full). */
enum { RC_NONE, RC_SEL, RC_FULL, NRC };
static const char *const rc_deck[NRC] = {"none", "attention", "blocks"};
static const char *const rc_name[NRC] = {"", " +selective", " +full"};

/* The paper's bytes per layer (Table 2), exact: every division is by t,
 * which must divide sbh and a. */
static int64_t paper(int64_t s, int64_t b, int64_t h, int64_t a, int64_t t, int sp, int rc) {
  int64_t sbh = s * b * h, att = rc == RC_SEL ? 0 : 5 * a * s * s * b;
  if (sbh % t || a % t) {
    printf("t %lld does not divide both sbh and a: the paper's bytes are not whole  FAILED\n",
           (long long)t);
    ++g_fail;
  }
  if (rc == RC_FULL) return sp ? 2 * sbh / t : 2 * sbh;
  return sp ? (34 * sbh + att) / t : 10 * sbh + (24 * sbh + att) / t;
}

/* What trident should keep per layer (the header's table), bf16 activations. */
static double predicted(double s, double b, double h, double a, double t, int sp, int rc) {
  double sbh = s * b * h, sb = s * b, att = rc == RC_SEL ? 0.0 : 4.0 * a * s * s * b / t;
  if (rc == RC_FULL) return sp ? 4.0 * sbh / t : 4.0 * sbh; /* res3, float32 */
  return sp ? sbh / t * 50.0 + 16.0 * sb / t + att : sbh * (12.0 + 38.0 / t) + 16.0 * sb + att;
}

/* Trident's per-layer buffers (GPT-2 only: LLaMA's fch is twice as wide,
 * gate and up) at the paper's storage, bytes per element of the buffer:
 * `kept` the buffer as a 16-bit tensor (0: the paper keeps none), `added`
 * the paper's dropout tensors trident does not have, of the buffer's shape.
 * The masks after attention's output projection and after the MLP both
 * have the residual stream's shape (res2's = res3's per layer: replicated
 * over tp without sp, split with it); both go with res2, which a layer keeps
 * exactly when it keeps its internals, so that under full recomputation
 * (res3, the next layer's input, alone) there is none, as in the paper. */
static const struct {
  const char *what;
  int64_t kept, added;
} at_paper[] = {
    {"activations ln1", 2, 0},      /* LayerNorm 1 output = the QKV matmul's input */
    {"activations ln1_mean", 0, 0}, /* LayerNorm statistics: the paper keeps none */
    {"activations ln1_rstd", 0, 0},
    {"activations qkv", 2, 0},      /* Q, K, V */
    {"activations att", 2, 3},      /* per score: softmax 2; dropout mask 1, dropout output 2 */
    {"activations atty", 2, 0},     /* attention output = the projection's input */
    {"activations res2", 2, 2},     /* LayerNorm 2 input; the masks after the projection and
                                       after the MLP, 1 + 1 */
    {"activations ln2", 2, 0},      /* LayerNorm 2 output = the first MLP matmul's input */
    {"activations ln2_mean", 0, 0},
    {"activations ln2_rstd", 0, 0},
    {"activations fch", 2, 0},      /* GELU input */
    {"activations fch_gelu", 2, 0}, /* GELU output = the second MLP matmul's input */
    {"activations res3", 2, 0},     /* block output = the next block's LayerNorm 1 input */
};
enum { NPAPER = sizeof at_paper / sizeof at_paper[0] };

/* Elements of m's ledger entries named what (every slot's and the shared
 * block's together); *es their element size (0 if none). */
static int64_t ledger_n(const td_model *m, const char *what, int64_t *es) {
  int64_t n = 0;
  *es = 0;
  for (int i = 0; i < m->nledger; ++i)
    if (!strcmp(m->ledger[i].what, what)) n += m->ledger[i].n, *es = (int64_t)m->ledger[i].es;
  return n;
}

static int in_at_paper(const char *what) {
  for (int r = 0; r < NPAPER; ++r)
    if (!strcmp(at_paper[r].what, what)) return 1;
  return 0;
}

/* One layer's bytes from the ledgers of L + 1 (big) and L (small) layers:
 * trident's (Σ Δn·es over the buffers) and at the paper's storage. A buffer
 * whose count changes with L but that at_paper does not name fails. */
static void per_layer(const td_model *big, const td_model *small, int64_t *trident,
                      int64_t *priced) {
  *trident = *priced = 0;
  for (int r = 0; r < NPAPER; ++r) {
    int64_t es, es2, n = ledger_n(big, at_paper[r].what, &es) -
                         ledger_n(small, at_paper[r].what, &es2);
    *trident += n * es;
    *priced += n * (at_paper[r].kept + at_paper[r].added);
  }
  for (int k = 0; k < 2; ++k) {
    const td_model *m = k ? small : big;
    for (int i = 0; i < m->nledger; ++i) {
      const char *what = m->ledger[i].what;
      int64_t es;
      if (!in_at_paper(what) && ledger_n(big, what, &es) != ledger_n(small, what, &es)) {
        printf("per-layer buffer \"%s\" not in at_paper  FAILED\n", what);
        ++g_fail;
      }
    }
  }
}

int main(void) {
  const int64_t V = 50304, b = 1;
  const struct { int64_t s, h, a; } shapes[] = {{2048, 2304, 24}, {2048, 8192, 64}};
  const int64_t tps[] = {1, 2, 8};
  struct {
    int64_t s, h, a, t, trident, priced, paper;
    char name[32];
  } rows[32]; /* 2 shapes × (3 modes at t 1 + 6 at t 2 and 8) */
  int nrows = 0;
  printf("%5s %5s %3s %2s %-22s %12s %12s %12s %8s\n", "s", "h", "a", "t", "mode",
         "trident MiB", "predicted", "paper MiB", "ratio");
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i)
    for (size_t j = 0; j < sizeof tps / sizeof tps[0]; ++j)
      for (int sp = 0; sp < 2; ++sp)
        for (int rc = 0; rc < NRC; ++rc) {
          int64_t s = shapes[i].s, h = shapes[i].h, a = shapes[i].a, t = tps[j];
          if (sp && t == 1) continue;
          sizeq q1, q2; /* 1 and 2 layers */
          query(&q1, s, h, a, t, 1, 1, b, V, sp, rc_deck[rc], "bf16");
          query(&q2, s, h, a, t, 1, 2, b, V, sp, rc_deck[rc], "bf16");
          double got = q2.m->act_bytes - q1.m->act_bytes;
          double want = predicted((double)s, (double)b, (double)h, (double)a, (double)t, sp, rc);
          int64_t ref = paper(s, b, h, a, t, sp, rc), trident, priced;
          per_layer(q2.m, q1.m, &trident, &priced);
          td_model_destroy(&q1.m);
          td_model_destroy(&q2.m);
          char name[32];
          snprintf(name, sizeof name, "%s%s", t == 1 ? "none" : sp ? "tp+sp" : "tp", rc_name[rc]);
          printf("%5lld %5lld %3lld %2lld %-22s %12.1f %12.1f %12.1f %8.3f%s\n", (long long)s,
                 (long long)h, (long long)a, (long long)t, name, got / 1048576.0,
                 want / 1048576.0, (double)ref / 1048576.0, got / (double)ref,
                 got == want ? "" : "  MISMATCH");
          if (got != want) ++g_fail;
          /* at_paper's buffers are the whole per-layer difference of act_bytes */
          if ((double)trident != got) {
            printf("  ledger per layer %lld bytes, act_bytes %.0f  MISMATCH\n",
                   (long long)trident, got);
            ++g_fail;
          }
          rows[nrows].s = s, rows[nrows].h = h, rows[nrows].a = a, rows[nrows].t = t;
          rows[nrows].trident = trident, rows[nrows].priced = priced, rows[nrows].paper = ref;
          snprintf(rows[nrows].name, sizeof rows[nrows].name, "%s", name);
          ++nrows;
        }
  /* Storage set to the paper's: the same layers, buffer by buffer at
   * at_paper's bytes, against the paper's formula to the byte. */
  printf("\nstorage set to the paper's (bytes per layer, b 1):\n");
  printf("%5s %5s %3s %2s %-22s %14s %14s %14s %6s\n", "s", "h", "a", "t", "mode",
         "trident", "at paper's", "paper", "equal");
  for (int r = 0; r < nrows; ++r) {
    int eq = rows[r].priced == rows[r].paper;
    printf("%5lld %5lld %3lld %2lld %-22s %14lld %14lld %14lld %6s\n", (long long)rows[r].s,
           (long long)rows[r].h, (long long)rows[r].a, (long long)rows[r].t, rows[r].name,
           (long long)rows[r].trident, (long long)rows[r].priced, (long long)rows[r].paper,
           eq ? "yes" : "NO");
    if (!eq) ++g_fail;
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
      double cp1 = predicted((double)s, (double)b, (double)h, (double)a, (double)t, 1,
                             sel ? RC_SEL : RC_NONE);
      printf("  cp %lld %-10s %10.1f MiB  predicted %10.1f  cp 1 %10.1f  ratio %.3f%s\n",
             (long long)c, sel ? "selective" : "none", got / 1048576.0, want / 1048576.0,
             cp1 / 1048576.0, got / cp1, got == want ? "" : "  MISMATCH");
      if (got != want) ++g_fail;
    }
  printf("%s\n", g_fail ? "FAILED" : "all per-layer bytes as predicted; at the paper's storage, "
                                     "the paper's to the byte");
  return g_fail ? 1 : 0;
}
