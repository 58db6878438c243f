/* gemm_rate.c — the CPU back-end's matmul rate on a GPT-2 model's own shapes,
 * for tests/bench/cpu_vs_torch.sh (trident's "utilisation" = model FLOP/s over
 * this rate). Not a test.
 *
 *   gemm_rate [--layers L] [--dim C] [--vocab V] [--tokens M] [--threads n]
 *             [--reps r] [--dtype fp32|bf16]
 *
 * --dtype bf16: the products as training.precision: bf16 issues them, bf16
 * operands (activations, weights, output gradients) and fp32 outputs.
 * The products are the ones app/model/gpt2.c (the layers) and app/model/model.c
 * (the head) issue, with the same transposes:
 * per layer the four linear layers (C→3C, C→C, C→4C, 4C→C), each as
 *   forward  Y (M,out)  = X (M,in) · W (in,out)
 *   dW       (in,out)  += Xᵀ · dY
 *   dX       (M,in)     = dY · Wᵀ
 * and the tied LM head (C→V):
 *   logits (M,V) = X · wteᵀ,  dwte (V,C) += dlᵀ · X,  dX (M,C) = dl · wte.
 * One warm-up round, then `reps` rounds; each product's time is the median of
 * its rounds (robust on a shared host). The rate is FLOP-weighted over the
 * model: Σ flops / Σ time with the layer products counted L times.
 * Prints one JSON line: {"gflops", "gflops_best", "layer_gflops",
 * "head_gflops", "matmul", "threads", ...}. Exit 0, or 1 with a message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/td_kernels.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double minimum(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
  return m;
}

/* One product of a linear layer: which = 0 forward, 1 dW, 2 dX; operands X,
 * W, dY of type t (dY = the forward output buffer, as a gradient), outputs Y
 * (forward), dW, dX float32. head: W is wte (V,C) with out = V, in = C, as
 * the model uses it. */
static td_status product(td_kernels *k, int head, int which, int64_t M, int64_t in,
                         int64_t out, td_dtype t, const void *X, const void *W, const void *dY,
                         float *Y, float *dW, float *dX) {
  if (!head) {
    if (which == 0) return k->gemm(k, 0, 0, M, out, in, X, t, W, t, 0.0f, Y, TD_DTYPE_F32);
    if (which == 1) return k->gemm(k, 1, 0, in, out, M, X, t, dY, t, 1.0f, dW, TD_DTYPE_F32);
    return k->gemm(k, 0, 1, M, in, out, dY, t, W, t, 0.0f, dX, TD_DTYPE_F32);
  }
  if (which == 0) return k->gemm(k, 0, 1, M, out, in, X, t, W, t, 0.0f, Y, TD_DTYPE_F32);
  if (which == 1) return k->gemm(k, 1, 0, out, in, M, dY, t, X, t, 1.0f, dW, TD_DTYPE_F32);
  return k->gemm(k, 0, 0, M, in, out, dY, t, W, t, 0.0f, dX, TD_DTYPE_F32);
}

static void fill(float *p, int64_t n, int64_t salt) {
  for (int64_t i = 0; i < n; i++) p[i] = 1e-2f * (float)(((i + salt) * 7919) % 97 - 48);
}

static int64_t arg_i(int argc, char **argv, const char *name, int64_t def) {
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], name) == 0) return strtoll(argv[i + 1], NULL, 10);
  return def;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      printf("usage: gemm_rate [--layers L] [--dim C] [--vocab V] [--tokens M] "
             "[--threads n] [--reps r] [--dtype fp32|bf16]\n");
      return 0;
    }
  int64_t L = arg_i(argc, argv, "--layers", 6), C = arg_i(argc, argv, "--dim", 384);
  int64_t V = arg_i(argc, argv, "--vocab", 256), M = arg_i(argc, argv, "--tokens", 1024);
  int threads = (int)arg_i(argc, argv, "--threads", 2), reps = (int)arg_i(argc, argv, "--reps", 5);
  if (L < 0 || C <= 0 || V <= 0 || M <= 0 || threads <= 0 || reps <= 0) {
    fprintf(stderr, "gemm_rate: sizes, threads and reps must be positive\n");
    return 1;
  }
  td_dtype dt = TD_DTYPE_F32;
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], "--dtype") == 0) {
      if (strcmp(argv[i + 1], "bf16") == 0) {
        dt = TD_DTYPE_BF16;
      } else if (strcmp(argv[i + 1], "fp32") != 0) {
        fprintf(stderr, "gemm_rate: --dtype must be fp32 or bf16\n");
        return 1;
      }
    }
  td_kernels *k = NULL;
  if (td_kernels_cpu_create(threads, &k) != TD_OK) {
    fprintf(stderr, "gemm_rate: %s\n", td_error_message());
    return 1;
  }
  /* Shapes (in, out); the last one is the head. */
  const int64_t shp[5][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {C, V}};
  int64_t maxw = V * C > 4 * C * C ? V * C : 4 * C * C;
  int64_t maxy = M * (V > 4 * C ? V : 4 * C);
  float *X = NULL, *W = NULL, *Y = NULL, *dW = NULL, *dX = NULL;
  void *Xh = NULL, *Wh = NULL, *Yh = NULL; /* the operands in bf16 */
  td_status st = TD_OK;
  if ((st = k->alloc(k, (void **)&X, (size_t)(M * 4 * C) * 4, "X")) != TD_OK ||
      (st = k->alloc(k, (void **)&dX, (size_t)(M * 4 * C) * 4, "dX")) != TD_OK ||
      (st = k->alloc(k, (void **)&W, (size_t)maxw * 4, "W")) != TD_OK ||
      (st = k->alloc(k, (void **)&dW, (size_t)maxw * 4, "dW")) != TD_OK ||
      (st = k->alloc(k, (void **)&Y, (size_t)maxy * 4, "Y")) != TD_OK) {
    fprintf(stderr, "gemm_rate: %s\n", td_error_message());
    return 1;
  }
  fill(X, M * 4 * C, 1);
  fill(W, maxw, 2);
  fill(Y, maxy, 3);
  if (dt == TD_DTYPE_BF16) {
    if ((st = k->alloc(k, &Xh, (size_t)(M * 4 * C) * 2, "X bf16")) != TD_OK ||
        (st = k->alloc(k, &Wh, (size_t)maxw * 2, "W bf16")) != TD_OK ||
        (st = k->alloc(k, &Yh, (size_t)maxy * 2, "dY bf16")) != TD_OK ||
        (st = k->cast(k, Xh, TD_DTYPE_BF16, X, TD_DTYPE_F32, M * 4 * C)) != TD_OK ||
        (st = k->cast(k, Wh, TD_DTYPE_BF16, W, TD_DTYPE_F32, maxw)) != TD_OK ||
        (st = k->cast(k, Yh, TD_DTYPE_BF16, Y, TD_DTYPE_F32, maxy)) != TD_OK) {
      fprintf(stderr, "gemm_rate: %s\n", td_error_message());
      return 1;
    }
  }
  const void *xo = dt == TD_DTYPE_BF16 ? Xh : X, *wo = dt == TD_DTYPE_BF16 ? Wh : W;
  const void *yo = dt == TD_DTYPE_BF16 ? Yh : Y;

  double *t = calloc((size_t)(15 * reps), sizeof(double));
  double med[15], best[15];
  if (!t) return 1;
  for (int r = -1; r < reps; r++)
    for (int s = 0; s < 5; s++)
      for (int w = 0; w < 3; w++) {
        double t0 = now_s();
        st = product(k, s == 4, w, M, shp[s][0], shp[s][1], dt, xo, wo, yo, Y, dW, dX);
        if (st == TD_OK) st = k->sync(k);
        if (st != TD_OK) {
          fprintf(stderr, "gemm_rate: %s\n", td_error_message());
          return 1;
        }
        if (r >= 0) t[(s * 3 + w) * reps + r] = now_s() - t0;
      }
  for (int i = 0; i < 15; i++) {
    best[i] = minimum(t + i * reps, reps);
    med[i] = median(t + i * reps, reps);
  }
  double fl_layer = 0, tl_med = 0, tl_best = 0, fl_head, th_med = 0, th_best = 0;
  for (int s = 0; s < 4; s++) {
    fl_layer += 6.0 * (double)M * (double)shp[s][0] * (double)shp[s][1];
    for (int w = 0; w < 3; w++) tl_med += med[s * 3 + w], tl_best += best[s * 3 + w];
  }
  fl_head = 6.0 * (double)M * (double)C * (double)V;
  for (int w = 0; w < 3; w++) th_med += med[12 + w], th_best += best[12 + w];
  double fl = (double)L * fl_layer + fl_head;
  double gf = fl / ((double)L * tl_med + th_med) * 1e-9;
  double gf_best = fl / ((double)L * tl_best + th_best) * 1e-9;
  printf("{\"gflops\": %.2f, \"gflops_best\": %.2f, \"layer_gflops\": %.2f, "
         "\"head_gflops\": %.2f, \"matmul\": \"%s\", \"dtype\": \"%s\", \"bf16_path\": \"%s\", "
         "\"threads\": %d, \"layers\": %lld, "
         "\"dim\": %lld, \"vocab\": %lld, \"tokens\": %lld, \"reps\": %d, "
         "\"model_matmul_gflop\": %.4f, \"products_ms\": [",
         gf, gf_best, fl_layer / tl_med * 1e-9, fl_head / th_med * 1e-9, k->matmul_name,
         dt == TD_DTYPE_BF16 ? "bf16" : "fp32",
         k->bf16_matmul == 2 ? "native" : k->bf16_matmul == 1 ? "widened" : "none", threads, (long long)L, (long long)C, (long long)V, (long long)M, reps, fl * 1e-9);
  for (int i = 0; i < 15; i++) printf("%s%.3f", i ? ", " : "", med[i] * 1e3);
  printf("]}\n");
  free(t);
  k->free(k, X), k->free(k, dX), k->free(k, W), k->free(k, dW), k->free(k, Y);
  if (Xh) k->free(k, Xh), k->free(k, Wh), k->free(k, Yh);
  td_kernels_destroy(&k);
  return 0;
}
