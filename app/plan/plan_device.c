/* plan_device.c — the planner's model of a GPU (td_plan.h): each matmul's time
 * from its shape (tile and wave quantisation over the SMs, or the memory it
 * moves when that is longer), the non-matmul kernels from the bytes they move,
 * per layer and micro-batch of one rank. Used when the cluster file gives
 * device.sms; otherwise the planner's efficiency model (the CPU files).
 *
 * The shapes are the products app/model/block.c and the heads run (gpt2:
 * qkv, proj, fc, fcproj; llama: q, k, v, o, gate, up, down), each split by tp
 * as the model splits them (column-parallel: N/tp; row-parallel: K/tp), on
 * the micro-batch's rows on this cp rank. A product Y(M×N) = X(M×K)·W(K×N)
 * runs three times in training: forward, the input gradient dX = dY·Wᵀ
 * (M×K, inner N) and the weight gradient dW = Xᵀ·dY (K×N, inner M). */
#include <math.h>
#include <string.h>

#include "app/plan/td_plan.h"

/* One product (or `batch` alike, as a strided batched gemm) on the device:
 * ceil(M/tm)·ceil(N/tn) tiles of the output per product run in waves of
 * `sms` tiles; each wave takes a tile's 2·tm·tn·K FLOPs at the SM's share of
 * peak × gemm_efficiency (NVIDIA, "Matrix Multiplication Background User's
 * Guide": tile and wave quantisation). When reading the operands and writing
 * the result (es bytes an element) at memory_gbps takes longer, that. */
double td_plan_gemm_s(const td_cluster *c, double M, double N, double K, double batch, double es,
                      double peak) {
  if (M <= 0 || N <= 0 || K <= 0 || batch <= 0) return 0.0;
  double tiles = ceil(M / c->tile_m) * ceil(N / c->tile_n) * batch;
  double waves = ceil(tiles / c->sms);
  double t_tile = 2.0 * c->tile_m * c->tile_n * K / (peak / c->sms * c->gemm_eff);
  double t_mem = (M * K + K * N + M * N) * batch * es / c->mem_bw;
  double t = waves * t_tile;
  return (t > t_mem ? t : t_mem) + c->kernel_s;
}

/* Bytes a memory-bound kernel moves at memory_gbps, as one launch. */
static double ew_s(const td_cluster *c, double bytes) {
  return bytes > 0 ? bytes / c->mem_bw + c->kernel_s : 0.0;
}

/* A product's three passes, added to the layer's forward, input-gradient and
 * weight-gradient time. */
static void product(const td_cluster *c, double M, double N, double K, double es, double peak,
                    td_plan_cost *o) {
  o->f += td_plan_gemm_s(c, M, N, K, 1, es, peak);
  o->bx += td_plan_gemm_s(c, M, K, N, 1, es, peak);
  o->bw += td_plan_gemm_s(c, K, N, M, 1, es, peak);
}

/* The deck's shapes and working precision: bytes an element, the peak. */
static void setup(const td_config *cfg, const td_cluster *c, td_model_dims *d, double *es,
                  double *peak, td_plan_cost *o) {
  td_config_dims(cfg, d);
  memset(o, 0, sizeof *o);
  int bf16 = strcmp(cfg->training_precision, "bf16") == 0;
  *es = bf16 ? 2.0 : 4.0, *peak = bf16 ? c->peak_bf16 : c->peak_fp32;
}

void td_plan_layer_cost(const td_config *cfg, const td_cluster *c, int64_t micro,
                        td_plan_cost *o) {
  td_model_dims d;
  double es, peak;
  setup(cfg, c, &d, &es, &peak, o);
  double tp = (double)cfg->parallel_tp, cp = (double)cfg->parallel_cp;
  double B = (double)micro, T = (double)d.T, C = (double)d.C, F = (double)d.F;
  double H = (double)d.H, KV = (double)d.KV, HS = (double)d.HS;
  double R = B * T / cp;                                        /* rows of a product */
  double Rn = cfg->parallel_sequence_parallel ? R / tp : R;     /* rows of a norm */
  double kvl = KV / tp < 1.0 ? 1.0 : KV / tp;                   /* key/value heads here */
  /* the matmuls */
  if (d.llama) {
    product(c, R, H * HS / tp, C, es, peak, o);   /* q */
    product(c, R, kvl * HS, C, es, peak, o);      /* k */
    product(c, R, kvl * HS, C, es, peak, o);      /* v */
    product(c, R, C, H * HS / tp, es, peak, o);   /* o */
    product(c, R, F / tp, C, es, peak, o);        /* gate */
    product(c, R, F / tp, C, es, peak, o);        /* up */
    product(c, R, C, F / tp, es, peak, o);        /* down */
  } else {
    product(c, R, 3.0 * C / tp, C, es, peak, o);  /* qkv */
    product(c, R, C, C / tp, es, peak, o);        /* proj */
    product(c, R, F / tp, C, es, peak, o);        /* fc */
    product(c, R, C, F / tp, es, peak, o);        /* fcproj */
  }
  /* attention over bh = B·heads/tp (batch, head) pairs, T/cp queries against
   * T keys. Materialised: S = Q·Kᵀ and O = P·V forward, dP, dV, dQ, dK
   * backward, the float32 scores softmaxed in place (read and written
   * forward; P, dP read and dS written backward). Fused (FlashAttention-2):
   * the causal half of the tiles, S and O forward; S again, dP, dV, dQ, dK
   * backward; only O and one float per row leave the kernel */
  double bh = B * H / tp, Tq = T / cp;
  /* the fused kernel's rate: device.attention_tflops (calibrated), else
   * peak × device.attention_efficiency (FlashAttention-2: 50–73% of an
   * A100's peak forward, 35% of an H100's), else its products as gemms */
  double ar = c->att_rate > 0 ? c->att_rate : c->att_eff > 0 ? peak * c->att_eff : 0.0;
  if (strcmp(cfg->model_attention, "fused") == 0) {
    double half = 0.5, fl = 4.0 * bh * Tq * T * HS * half; /* forward FLOPs */
    if (ar > 0) {
      o->att_f = fl / ar, o->att_b = 2.5 * fl / ar;
    } else {
      o->att_f = half * (td_plan_gemm_s(c, Tq, T, HS, bh, es, peak) +
                         td_plan_gemm_s(c, Tq, HS, T, bh, es, peak));
      o->att_b = half * (2.0 * td_plan_gemm_s(c, Tq, T, HS, bh, es, peak) +
                         td_plan_gemm_s(c, T, HS, Tq, bh, es, peak) +
                         td_plan_gemm_s(c, Tq, HS, T, bh, es, peak) +
                         td_plan_gemm_s(c, T, HS, Tq, bh, es, peak));
    }
    o->att_rec = 0.0;
  } else {
    double sc = bh * Tq * T * 4.0;
    double s = td_plan_gemm_s(c, Tq, T, HS, bh, es, peak), pv = td_plan_gemm_s(c, Tq, HS, T, bh, es, peak);
    if (c->att_rate > 0) s = pv = 2.0 * bh * Tq * T * HS / c->att_rate;
    o->att_f = s + pv + ew_s(c, 2.0 * sc);
    o->att_b = s + 3.0 * pv + ew_s(c, 3.0 * sc);
    o->att_rec = s + ew_s(c, 2.0 * sc); /* recompute: attention: the scores again */
  }
  o->f += o->att_f, o->bx += o->att_b;
  /* the non-matmul kernels, each reading its inputs and writing its output
   * once (block.c): two norms and two residual adds on the norm rows (a
   * norm reads the float32 stream and writes the working precision), the
   * activation (gpt2: GELU of R×F/tp; llama: SwiGLU reads two and writes
   * one, and RoPE rewrites q and k), gpt2's biases folded into the gemms'
   * epilogues. Backward moves about twice a kernel's forward bytes (it reads
   * the forward's input and the output's gradient, writes the input's) */
  double nb = Rn * C, fw = 0.0;
  fw += 2.0 * ew_s(c, nb * (4.0 + es));  /* norms */
  fw += 2.0 * ew_s(c, nb * 4.0 * 3.0);   /* residual adds (float32 stream) */
  if (d.llama) {
    fw += ew_s(c, 3.0 * R * F / tp * es);                  /* SwiGLU */
    fw += ew_s(c, 2.0 * R * (H + 2.0 * kvl * tp) / tp * HS * es); /* RoPE on q, k */
  } else {
    fw += ew_s(c, 2.0 * R * F / tp * es); /* GELU */
  }
  o->ew_f = fw;
  o->f += fw, o->bx += 2.0 * fw;
}

void td_plan_head_cost(const td_config *cfg, const td_cluster *c, int64_t micro,
                       td_plan_cost *o) {
  td_model_dims d;
  double es, peak;
  setup(cfg, c, &d, &es, &peak, o);
  double tp = (double)cfg->parallel_tp, cp = (double)cfg->parallel_cp;
  double R = (double)micro * (double)d.T / cp, V = (double)d.V / tp, C = (double)d.C;
  product(c, R, V, C, es, peak, o);
  /* the softmax cross-entropy over the float32 logits: read for the
   * statistics and the loss, dlogits written (materialised: also the
   * logits written by the gemm and read back) */
  double lg = R * V * 4.0;
  double ce = ew_s(c, (strcmp(cfg->model_head, "fused") == 0 ? 2.0 : 4.0) * lg);
  o->f += ce, o->ew_f = ce;
}
